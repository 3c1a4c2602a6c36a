package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

func migrateFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.toHost, "to", "", "destination host (hosts lists them); default: the zone's placement picks one")
}

// cmdMigrate waits for the migration (the server answers once the VM runs
// on its new host) and prints where it went and how long it took.
func cmdMigrate(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	res, err := c.admin.MigrateMachine(ctx, connect.NewRequest(&adminv1.MigrateMachineRequest{Id: id, ToHost: o.toHost}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	r := res.Msg
	fmt.Fprintf(w, "migrated %s from host %s to host %s in %s (%s)\n", id, r.GetFromHost(), r.GetToHost(),
		human(r.GetTook().AsDuration()), r.GetPlacement())
	t := newTable(w, machineHeader()...)
	t.row(machineRow(r.GetMachine())...)
	return t.flush()
}
