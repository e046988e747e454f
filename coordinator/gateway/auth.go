package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"
)

func keyHash(k string) [32]byte { return sha256.Sum256([]byte(k)) }

// authorized reports whether r carries one of the API keys (any request
// does when none is configured). Keys are compared by their hashes in
// constant time, so timing tells nothing of a key.
func (g *Gateway) authorized(r *http.Request) bool {
	if len(g.keys) == 0 {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	h := keyHash(strings.TrimSpace(tok))
	match := 0
	for _, k := range g.keys {
		match |= subtle.ConstantTimeCompare(h[:], k[:])
	}
	return match == 1
}

// cors answers browsers from the configured origins; with none it adds
// nothing, and browsers refuse cross-origin calls.
func (g *Gateway) cors(next http.Handler) http.Handler {
	if len(g.cfg.CORSOrigins) == 0 {
		return next
	}
	anyOrigin := slices.Contains(g.cfg.CORSOrigins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && (anyOrigin || slices.Contains(g.cfg.CORSOrigins, origin)) {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Expose-Headers", SeedHeader) // readable by the page's script
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions {
				h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, traceparent, tracestate")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
