// The bench-hosts harness (make bench-hosts) is its own module, so the
// tools module needs none of the provider's packages: it imports the
// provider's generated API from the working tree.
module github.com/bigfleet/libvirt-provider/tools/benchhosts

go 1.26.0

require (
	github.com/bigfleet/libvirt-provider v0.0.0
	google.golang.org/grpc v1.85.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.63.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/bigfleet/libvirt-provider => ../..
