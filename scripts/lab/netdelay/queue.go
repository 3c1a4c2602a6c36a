package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// rcvBuf is the socket receive buffer we ask for. Every packet held back
// sits in the kernel's queue, not here, so this only has to absorb bursts
// between two reads; what overflows it is accepted undelayed (fail-open).
const rcvBuf = 8 << 20

// queue is a netlink socket bound to one NFQUEUE queue number.
type queue struct {
	num  uint16
	file *os.File // owns the socket; lets reads wait in the runtime poller
	conn syscall.RawConn
	seq  uint32
	buf  []byte
}

// openQueue opens the socket and binds queue num to it, ready to receive
// packet metadata.
func openQueue(num uint16, maxlen uint32) (*queue, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK,
		syscall.SOCK_RAW|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, syscall.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	// SO_RCVBUFFORCE goes past net.core.rmem_max (we are root); plain
	// SO_RCVBUF is the fallback without CAP_NET_ADMIN.
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, rcvBuf) != nil {
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvBuf)
	}
	// A non-blocking fd in an os.File waits in the poller, so a read
	// deadline can stop the reader at shutdown.
	f := os.NewFile(uintptr(fd), "nfqueue")
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	q := &queue{num: num, file: f, conn: conn, buf: make([]byte, 1<<16)}
	if err := q.bind(maxlen); err != nil {
		f.Close()
		return nil, err
	}
	return q, nil
}

// bind binds the queue and configures it. PF_UNBIND/PF_BIND only matter
// on kernels before 3.8, where a protocol family had to be handed to
// nfnetlink_queue first; newer ones ignore them, so their errors don't count.
func (q *queue) bind(maxlen uint32) error {
	_ = q.request(cmdMessage(q.num, q.next(), cfgCmdPFUnbind, syscall.AF_INET))
	_ = q.request(cmdMessage(q.num, q.next(), cfgCmdPFBind, syscall.AF_INET))
	if err := q.request(cmdMessage(q.num, q.next(), cfgCmdBind, syscall.AF_INET)); err != nil {
		if errors.Is(err, syscall.EPERM) {
			// The kernel's answer both to a queue bound by another
			// socket and to a caller without CAP_NET_ADMIN.
			return fmt.Errorf("bind queue %d: %w (another program has it bound, or we are not root)", q.num, err)
		}
		return fmt.Errorf("bind queue %d: %w", q.num, err)
	}
	err := q.request(paramsMessage(q.num, q.next(), copyMeta, 0, maxlen, cfgFFailOpen|cfgFGSO))
	if err != nil {
		return fmt.Errorf("configure queue %d: %w", q.num, err)
	}
	return nil
}

// unbind gives the queue back; --queue-bypass then lets its packets pass.
// The kernel drops packets still queued to us at that moment, so callers
// accept everything they hold first.
func (q *queue) unbind() error {
	if err := q.request(cmdMessage(q.num, q.next(), cfgCmdUnbind, syscall.AF_INET)); err != nil {
		return fmt.Errorf("unbind queue %d: %w", q.num, err)
	}
	return nil
}

func (q *queue) close() error { return q.file.Close() }

func (q *queue) next() uint32 { q.seq++; return q.seq }

// request sends a config message and waits for its acknowledgement. Only
// used while nothing else reads the socket. A packet that arrives while we
// wait is accepted at once rather than left to be dropped.
func (q *queue) request(b []byte) error {
	seq := getNlMsghdr(b).Seq
	if err := q.send(b); err != nil {
		return err
	}
	if err := q.file.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	defer q.file.SetReadDeadline(time.Time{})
	for {
		msgs, err := q.receive()
		if errors.Is(err, syscall.ENOBUFS) || errors.Is(err, errMalformed) {
			continue // lost or unreadable; the ack may still come
		}
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == typePacket {
				if p, err := decodePacket(m.Data); err == nil {
					_ = q.verdict(p.ID, nfAccept)
				}
				continue
			}
			if m.Header.Type != nlmsgError || m.Header.Seq != seq {
				continue
			}
			errno, _, err := decodeError(m.Data)
			if err != nil {
				return err
			}
			if errno != 0 {
				return syscall.Errno(-errno)
			}
			return nil
		}
	}
}

// send writes one message to the kernel.
func (q *queue) send(b []byte) error {
	var err error
	werr := q.conn.Write(func(fd uintptr) bool {
		err = syscall.Sendto(int(fd), b, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
		return err != syscall.EAGAIN
	})
	if werr != nil {
		return werr
	}
	return err
}

// verdict decides one packet.
func (q *queue) verdict(id, verdict uint32) error {
	return q.send(verdictMessage(q.num, id, verdict))
}

// receive reads one datagram and splits it into messages. ENOBUFS, our
// receive buffer having overflowed, comes back as is: the packets lost
// were accepted by the kernel (fail-open) and the caller goes on.
// Messages not from the kernel (port 0) are dropped: only it may queue
// packets to us.
func (q *queue) receive() ([]message, error) {
	var (
		n    int
		from syscall.Sockaddr
		err  error
	)
	rerr := q.conn.Read(func(fd uintptr) bool {
		n, from, err = syscall.Recvfrom(int(fd), q.buf, 0)
		return err != syscall.EAGAIN
	})
	if rerr != nil {
		return nil, rerr
	}
	if err != nil {
		return nil, err
	}
	if sa, ok := from.(*syscall.SockaddrNetlink); !ok || sa.Pid != 0 {
		return nil, nil
	}
	msgs, err := parseMessages(q.buf[:n])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	return msgs, nil
}

// errMalformed is a datagram we could not split into messages: reported,
// not fatal, since one bad read must not end the delay.
var errMalformed = errors.New("malformed netlink datagram")

// interrupt makes a blocked or later receive return os.ErrDeadlineExceeded.
func (q *queue) interrupt() { _ = q.file.SetReadDeadline(time.Now()) }
