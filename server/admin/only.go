package admin

import (
	"net/http"
	"strings"

	"github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1/adminv1connect"
)

// Only restricts a handler built with Mount to the admin API and the page,
// for the --admin-addr listener: that listener trusts its own client CA
// (--admin-tls-ca), so it must not also answer CapacityProvider, health or
// reflection to the operators' certificates. Anything else is 404.
func Only(h http.Handler) http.Handler {
	prefix := "/" + adminv1connect.AdminServiceName + "/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, prefix) || p == "/" || strings.HasPrefix(p, "/ui/") {
			h.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	})
}
