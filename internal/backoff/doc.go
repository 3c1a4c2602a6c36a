// Package backoff is the one capped doubling delay the provider's retry
// and poll loops wait with: it starts at Initial, doubles after every wait
// and never exceeds Max. With Jitter each wait is a random time between
// half the delay and the delay, so that callers that failed together do
// not retry in lockstep.
package backoff
