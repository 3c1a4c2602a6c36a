// Command netdelay holds every packet of one NFQUEUE queue for a fixed
// time before accepting it: network latency for a lab host on a kernel
// without the netem qdisc. It speaks nfnetlink_queue itself over a
// NETLINK_NETFILTER socket (no nfqueue module is available here).
//
//	netdelay -queue N -delay 150ms
//
// Semantics: each packet queued to N is accepted -delay after netdelay read
// it, in the order the packets arrived (never reordered). netdelay only
// ever accepts packets, never drops or changes them. Queueing happens in iptables;
// netdelay only holds what is queued to it. Because iptables sees every
// packet, connections that were established before the rules went in are
// delayed too.
//
// iptables queues the packets, in the lab host's network namespace, with
// netdelay already running there:
//
//	iptables -A BFLAB -i eth0 -j NFQUEUE --queue-num N --queue-bypass
//	iptables -A BFLAB -o eth0 -j NFQUEUE --queue-num N --queue-bypass
//
// --queue-bypass lets packets through unqueued while no program has the
// queue bound, so a netdelay that stopped or died never partitions the
// host. The queue is also fail-open: when it (-maxlen packets) or our
// socket buffer is full, the kernel accepts the packet undelayed (ahead
// of the held ones).
//
// Both rules: a round trip through eth0 grows by 2×delay, so run
// -delay MS/2 for MS (what scripts/lab/faults.sh does). The -i rule alone
// with -delay MS grows it by MS as well, and is the better choice for
// bulk traffic: a packet held on its way out still counts against its
// local sending socket until it leaves, so TCP Small Queues lets that
// socket have only a couple of packets out per delay and a local bulk
// sender crawls (about 60 KiB/s at 50ms). Incoming packets are orphaned
// from their sender before INPUT, so the -i rule costs no throughput
// (lab_test.go measures both).
//
// netdelay prints "netdelay: queue N, delay D" on stderr once the queue is
// bound. On SIGTERM or SIGINT it accepts every packet it holds at once and
// unbinds; packets the kernel queued in the last instant may be dropped
// (TCP resends them).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	num := flag.Uint("queue", 0, "NFQUEUE queue number to bind (0-65535)")
	delay := flag.Duration("delay", 0, "how long to hold each packet")
	maxlen := flag.Uint("maxlen", 4096, "packets the kernel may hold for us; more are accepted undelayed")
	flag.Parse()
	if flag.NArg() != 0 || *num > 0xffff || *delay < 0 || *maxlen == 0 || *maxlen > 1<<20 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, uint16(*num), *delay, uint32(*maxlen)); err != nil {
		fmt.Fprintln(os.Stderr, "netdelay:", err)
		os.Exit(1)
	}
}

// held is a packet we have not decided yet.
type held struct {
	due time.Time
	id  uint32
}

// run binds the queue and delays its packets until ctx ends.
func run(ctx context.Context, num uint16, delay time.Duration, maxlen uint32) error {
	q, err := openQueue(num, maxlen)
	if err != nil {
		return err
	}
	defer q.close()
	fmt.Fprintf(os.Stderr, "netdelay: queue %d, delay %v\n", num, delay)

	// The kernel holds at most maxlen undecided packets, so a FIFO of that
	// size never makes the reader wait for long.
	fifo := make(chan held, maxlen)
	drain := make(chan struct{})
	released := make(chan struct{})
	accept := func(id uint32) error { return q.verdict(id, nfAccept) }
	go func() { release(accept, fifo, drain); close(released) }()
	readDone := make(chan error, 1)
	go func() { readDone <- read(q, delay, fifo); close(fifo) }()

	select {
	case <-ctx.Done():
	case err = <-readDone:
		readDone <- err // the reader failed; collected below all the same
	}
	// Stop reading, accept everything held, then unbind: the kernel drops
	// whatever is still queued to us when we unbind.
	q.interrupt()
	close(drain)
	err = <-readDone
	<-released
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
	}
	return errors.Join(err, q.unbind())
}

// read queues every packet the kernel hands us, due delay from now, until
// the socket fails or is interrupted.
func read(q *queue, delay time.Duration, fifo chan<- held) error {
	var overflows uint64
	for {
		msgs, err := q.receive()
		if errors.Is(err, syscall.ENOBUFS) {
			overflows++
			if overflows&(overflows-1) == 0 { // 1, 2, 4, 8...: a line, not a flood
				fmt.Fprintf(os.Stderr, "netdelay: receive buffer overflowed (%d times); those packets went through undelayed\n", overflows)
			}
			continue
		}
		if errors.Is(err, errMalformed) {
			fmt.Fprintln(os.Stderr, "netdelay:", err)
			continue
		}
		if err != nil {
			return err
		}
		now := time.Now()
		for _, m := range msgs {
			handle(m, now.Add(delay), fifo)
		}
	}
}

// handle queues a packet message and reports a failed verdict.
func handle(m message, due time.Time, fifo chan<- held) {
	switch m.Header.Type {
	case typePacket:
		p, err := decodePacket(m.Data)
		if err != nil {
			fmt.Fprintln(os.Stderr, "netdelay: bad packet message:", err)
			return
		}
		fifo <- held{due: due, id: p.ID}
	case nlmsgError:
		if errno, _, err := decodeError(m.Data); err == nil && errno != 0 {
			fmt.Fprintln(os.Stderr, "netdelay: verdict refused:", syscall.Errno(-errno))
		}
	}
}

// release accepts each packet when it is due, in arrival order: the delay
// is the same for all, so the FIFO is also ordered by due time. Once drain
// is closed it accepts what is left at once. It ends when fifo is closed.
func release(accept func(id uint32) error, fifo <-chan held, drain <-chan struct{}) {
	timer := time.NewTimer(0)
	<-timer.C
	for h := range fifo {
		if wait := time.Until(h.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-drain:
				timer.Stop()
			}
		}
		if err := accept(h.id); err != nil {
			fmt.Fprintf(os.Stderr, "netdelay: verdict for packet %d: %v\n", h.id, err)
		}
	}
}
