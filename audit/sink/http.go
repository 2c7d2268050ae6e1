package sink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// httpSender POSTs each batch as JSON lines; a 2xx answer acknowledges it.
type httpSender struct {
	url    string
	client *http.Client
}

func newHTTP(u *url.URL) *httpSender {
	return &httpSender{url: u.String(), client: &http.Client{Timeout: timeout}}
}

func (s *httpSender) Send(ctx context.Context, lines [][]byte) error {
	body := append(bytes.Join(lines, []byte("\n")), '\n')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/jsonl")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // lets the connection be reused
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s", s.url, resp.Status)
	}
	return nil
}

func (s *httpSender) Close() error {
	s.client.CloseIdleConnections()
	return nil
}
