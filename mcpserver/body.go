package mcpserver

import (
	"bytes"
	"io"
	"net/http"
)

// heldBody is a request body read into memory: Protect reads it for its
// checks, and the session table, tools/list and the fast path look at it
// again without copying it each time; mcp-go reads it as any body.
type heldBody struct {
	*bytes.Reader
	data []byte
}

func (heldBody) Close() error { return nil }

func holdBody(r *http.Request, data []byte) {
	r.Body = heldBody{bytes.NewReader(data), data}
}

// requestBody is r's body, which stays to be read again.
func requestBody(r *http.Request) ([]byte, error) {
	if h, ok := r.Body.(heldBody); ok && h.Len() == len(h.data) {
		return h.data, nil
	}
	data, err := io.ReadAll(r.Body)
	holdBody(r, data)
	return data, err
}
