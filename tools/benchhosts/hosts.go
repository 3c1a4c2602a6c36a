package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend/hostsfile"
)

// nodeXML is one healthy host: a private libvirt test-driver node
// (test:///PATH opens a fresh instance of it per connection, so no two
// hosts share a domain) with the storage pool, golden image volume and
// network the provider's flags name, so a Create really defines and
// starts a domain on it. The test driver offers only domain type "test",
// which --domain-type=auto takes.
const nodeXML = `<?xml version="1.0"?>
<!-- bench-hosts: healthy host %[1]s (libvirt test driver) -->
<node>
  <cpu><nodes>1</nodes><sockets>1</sockets><cores>32</cores><threads>1</threads><active>32</active><mhz>2000</mhz></cpu>
  <memory>134217728</memory>
  <network>
    <name>%[3]s</name>
    <bridge name="bfbench0"/>
    <forward/>
    <ip address="192.0.2.1" netmask="255.255.255.0"/>
  </network>
  <pool type="dir">
    <name>%[2]s</name>
    <uuid>35bb2ad9-388a-cdfe-461a-b8907f6e53fe</uuid>
    <capacity unit="GiB">1000</capacity>
    <allocation unit="GiB">1</allocation>
    <available unit="GiB">999</available>
    <target><path>/var/lib/bf-bench-hosts/%[1]s</path></target>
    <volume type="file">
      <name>%[4]s</name>
      <capacity unit="MiB">64</capacity>
      <allocation unit="MiB">10</allocation>
      <target><path>/var/lib/bf-bench-hosts/%[1]s/%[4]s</path><format type="qcow2"/></target>
    </volume>
  </pool>
</node>
`

// fleet is the hosts file and offerings of one run.
type fleet struct {
	hostsFile, offerings string
	healthy, parted      []string // zone (= host) names
}

// writeFleet writes nHealthy test-driver hosts (zones h001…) and nParted
// entries (zones p001…) that all point at partURI, one zone per host;
// only healthy zones get slots (slots each).
func writeFleet(dir string, nHealthy, nParted, slots int, partURI, pool, image, network string) (*fleet, error) {
	f := &fleet{hostsFile: filepath.Join(dir, "hosts.yaml"), offerings: filepath.Join(dir, "offerings.json")}
	var y strings.Builder
	y.WriteString("# bench-hosts: healthy hosts on the libvirt test driver, partitioned ones on one lab daemon\nhosts:\n")
	type offering struct {
		InstanceType string `json:"instance_type"`
		Zone         string `json:"zone"`
		Count        int    `json:"count"`
	}
	var offs []offering
	if err := os.MkdirAll(filepath.Join(dir, "hosts"), 0o755); err != nil {
		return nil, err
	}
	for i := 1; i <= nHealthy; i++ {
		name := fmt.Sprintf("h%03d", i)
		xml := filepath.Join(dir, "hosts", name+".xml")
		if err := os.WriteFile(xml, fmt.Appendf(nil, nodeXML, name, pool, network, image), 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(&y, "  - name: %s\n    zone: %s\n    uri: \"test://%s\"\n    labels: {kind: test-driver}\n", name, name, xml)
		f.healthy = append(f.healthy, name)
		offs = append(offs, offering{"kvm.small", name, slots})
	}
	for i := 1; i <= nParted; i++ {
		name := fmt.Sprintf("p%03d", i)
		fmt.Fprintf(&y, "  - name: %s\n    zone: %s\n    uri: %q\n    labels: {kind: lab-partitioned}\n", name, name, partURI)
		f.parted = append(f.parted, name)
	}
	if err := os.WriteFile(f.hostsFile, []byte(y.String()), 0o644); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(offs)
	if err := os.WriteFile(f.offerings, b, 0o644); err != nil {
		return nil, err
	}
	// The provider's own parser checks the file we wrote.
	if _, err := hostsfile.Load(f.hostsFile); err != nil {
		return nil, err
	}
	return f, nil
}

// labURI returns the URI of the lab host named host from the lab's hosts
// file ($BIGFLEET_LAB_HOSTS).
func labURI(hostsPath, host string) (string, error) {
	hf, err := hostsfile.Load(hostsPath)
	if err != nil {
		return "", err
	}
	for _, h := range hf.Hosts {
		if h.Name == host {
			return h.URI, nil
		}
	}
	return "", fmt.Errorf("%s: no host %s", hostsPath, host)
}
