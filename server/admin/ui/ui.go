// Package ui embeds the admin web page's built bundle (index.html, app.js,
// app.css), produced from web/ by `make web` and committed, so building the
// provider needs no Node.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed dist
var dist embed.FS

// Handler serves index.html at "/" and the bundle's files under "/ui/".
// Mount it only on "GET /{$}" and "GET /ui/": every other path belongs to
// the RPC services on the same mux.
func Handler() http.Handler {
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	assets := http.StripPrefix("/ui/", http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Same origin only: the page talks to this server and nothing else.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; "+
			"script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == "/" {
			http.ServeFileFS(w, r, files, "index.html")
			return
		}
		if r.URL.Path == "/ui/" || r.URL.Path == "/ui/index.html" {
			http.Redirect(w, r, "/", http.StatusMovedPermanently)
			return
		}
		assets.ServeHTTP(w, r)
	})
}
