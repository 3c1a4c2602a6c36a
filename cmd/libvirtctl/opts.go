package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// opts holds every flag; each subcommand registers the globals plus its own.
type opts struct {
	addr, protocol, output string
	tlsCA, tlsCert, tlsKey string
	insecure               bool
	states                 []pb.MachineState
	zones                  []string
	max                    int
	events                 int
	shard                  string
	epoch, seq             int64
	seqSet                 bool // --seq was given
	cluster, blobFile      string
	metadata               map[string]string
	grace                  int64
	marksShard             string
	clearShard             string
	reason                 string
	toHost                 string
}

func defaultOpts() *opts {
	return &opts{addr: "localhost:9000", protocol: "grpc", output: "table", grace: -1}
}

func newFlagSet(name string, o *opts, own func(*flag.FlagSet, *opts)) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.addr, "addr", o.addr, "provider address: host:port, or an http:// or https:// URL")
	fs.StringVar(&o.protocol, "protocol", o.protocol, "wire protocol: grpc, connect or grpcweb")
	fs.StringVar(&o.output, "o", o.output, "output: table or json")
	fs.StringVar(&o.tlsCA, "tls-ca", o.tlsCA, "CA bundle that signed the server's certificate (enables TLS)")
	fs.StringVar(&o.tlsCert, "tls-cert", o.tlsCert, "client certificate for mTLS (with --tls-key; enables TLS)")
	fs.StringVar(&o.tlsKey, "tls-key", o.tlsKey, "client key for mTLS (with --tls-cert)")
	fs.BoolVar(&o.insecure, "insecure", o.insecure, "TLS without verifying the server's certificate (testing only)")
	if own != nil {
		own(fs, o)
		fs.SetOutput(io.Discard)
	}
	return fs
}

func listFlags(fs *flag.FlagSet, o *opts) {
	fs.Func("state", "only machines in these states (repeatable or comma-separated, e.g. IDLE,FAILED)", func(s string) error {
		for _, part := range strings.Split(s, ",") {
			st, err := parseState(part)
			if err != nil {
				return err
			}
			o.states = append(o.states, st)
		}
		return nil
	})
	fs.Func("zone", "only machines in these zones (repeatable or comma-separated)", func(s string) error {
		o.zones = append(o.zones, strings.Split(s, ",")...)
		return nil
	})
	fs.IntVar(&o.max, "max", 0, "at most this many machines (0 = all)")
}

func watchFlags(fs *flag.FlagSet, o *opts) {
	fs.IntVar(&o.events, "events", 0, "exit after this many change events (0 = until interrupted)")
}

func marksFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.marksShard, "shard", "", "only this shard's marks")
}

func fenceClearFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.clearShard, "shard", "", "the shard whose mark is removed (required; marks lists them)")
}

func cordonFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.reason, "reason", "", "why the host is cordoned, shown in hosts and the admin page")
}

func downFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.reason, "reason", "", "how the host is known to be off or fenced (required), shown in hosts and the admin page")
}

func tokenFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.shard, "shard", "", "fencing token: shard id (empty: the shard of a --tls-cert with URI SAN bigfleet://shard/<id>, else no token)")
	fs.Int64Var(&o.epoch, "epoch", 0, "fencing token: shard epoch")
	fs.Func("seq", "fencing token: sequence number (default: the current time in nanoseconds when there is a shard)", func(s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		o.seq, o.seqSet = v, err == nil
		return err
	})
}

func configureFlags(fs *flag.FlagSet, o *opts) {
	tokenFlags(fs, o)
	fs.StringVar(&o.cluster, "cluster", "", "cluster id to join (required)")
	fs.StringVar(&o.blobFile, "blob-file", "", "file holding the bootstrap blob, sent as is (required)")
	fs.Func("metadata", "shard metadata k=v (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("--metadata %q: want key=value", s)
		}
		if o.metadata == nil {
			o.metadata = map[string]string{}
		}
		o.metadata[k] = v
		return nil
	})
}

func drainFlags(fs *flag.FlagSet, o *opts) {
	tokenFlags(fs, o)
	fs.Int64Var(&o.grace, "grace", -1, "grace period in seconds for the drain hook (required, 0 = none)")
}

func (o *opts) validate() error {
	if !slices.Contains([]string{"grpc", "connect", "grpcweb"}, o.protocol) {
		return usagef("--protocol %q: want grpc, connect or grpcweb", o.protocol)
	}
	if o.output != "table" && o.output != "json" {
		return usagef("-o %q: want table or json", o.output)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together")
	}
	if o.max < 0 || o.events < 0 {
		return usagef("--max and --events must not be negative")
	}
	return nil
}

// parseState accepts IDLE, idle and MACHINE_STATE_IDLE.
func parseState(s string) (pb.MachineState, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, "MACHINE_STATE_") {
		name = "MACHINE_STATE_" + name
	}
	v, ok := pb.MachineState_value[name]
	if !ok || v == 0 {
		return 0, fmt.Errorf("unknown state %q (want one of SPECULATIVE, CREATING, IDLE, CONFIGURING, CONFIGURED, DRAINING, DELETING, FAILED)", s)
	}
	return pb.MachineState(v), nil
}

func stateName(s pb.MachineState) string {
	return strings.TrimPrefix(s.String(), "MACHINE_STATE_")
}
