// Package browser holds the admin page's real-browser test: headless
// Debian Chromium, driven over the DevTools protocol through a pipe
// (--remote-debugging-pipe, so no port and no websocket library), loads
// the page from an in-process provider on loopback and watches it update
// live over gRPC-Web. Run it with `make test-browser` (build tag browser).
package browser
