// Package domxml is the domain XML the provider writes and the allow-list
// every definition is checked against: the typed definition built section
// by section (Params, Build), the machine shapes' firmware, CPU, huge pages
// and TPM as they render, the definition policy (Policy.Check) and its
// form for libvirt's own rendering of a domain (Policy.CheckRendered), and
// the destination definition of a live migration (DestXML). It is pure:
// no connection, no Backend; the backend fills a Policy from its
// configuration and a Create's volumes.
package domxml
