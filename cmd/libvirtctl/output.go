package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// writeJSON prints one message as indented protojson (field names as in
// the proto, so the output matches grpcurl and buf curl).
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// writeJSONLine prints one message per line (for watch: NDJSON).
func writeJSONLine(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) {
	for i, c := range cols {
		if c == "" {
			cols[i] = "-"
		}
		cols[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(cols[i])
	}
	fmt.Fprintln(t.tw, strings.Join(cols, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// human renders a duration the way an operator reads it: 850ms, 12s,
// 3m12s, 2h05m, 3d04h.
func human(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func dur(d *durationpb.Duration) string {
	if d == nil {
		return ""
	}
	return human(d.AsDuration())
}

func stamp(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05")
}

// truncate keeps tables readable; the full text is in -o json.
func truncate(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func machineHeader() []string {
	return []string{"ID", "STATE", "ZONE", "TYPE", "HOST", "CLUSTER", "IN STATE", "OPERATION", "LAST ERROR"}
}

// stateWithBoot is the machine's state with its boot phase beside it:
// "IDLE (booting)" while the guest has not passed the image's booted check.
func stateWithBoot(m *adminv1.AdminMachine) string {
	s := stateName(m.GetMachine().GetState())
	if p := m.GetBootPhase(); p != "" {
		s += " (" + p + ")"
	}
	return s
}

func machineRow(m *adminv1.AdminMachine) []string {
	pm := m.GetMachine()
	op := m.GetOperationKind()
	if m.GetOperationId() != "" {
		op += " " + m.GetOperationId()
	}
	return []string{pm.GetId(), stateWithBoot(m), pm.GetZone(), pm.GetInstanceType(),
		pm.GetHost().GetRef(), pm.GetCluster(), dur(m.GetTimeInState()), strings.TrimSpace(op), truncate(pm.GetLastError(), 60)}
}
