// Package config is what the libvirt backend is told: the hosts and the
// zones they serve (--connect, --hosts), their names, the transports and
// URI parameters allowed (ValidateURI: weak transports are refused at
// startup), the golden image, pool, network, shapes and the bounds of
// every call, with defaults (SetDefaults) and one validation whose
// messages name the flag at fault (Validate). backend/libvirt re-exports
// Config, Host and ParseConnect for its callers.
package config
