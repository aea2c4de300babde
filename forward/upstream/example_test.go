package upstream_test

import (
	"log"
	"net/http"

	"github.com/ustack-dev/ustack/forward/upstream"
)

// A dialer through a SOCKS5 proxy, used by an HTTP client. An http://
// URL gives an HTTP CONNECT proxy the same way. (Not run: it needs a
// proxy listening on 127.0.0.1:1080.)
func ExampleParse() {
	d, err := upstream.Parse("socks5://user:secret@127.0.0.1:1080", nil)
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	resp, err := client.Get("http://example.com/")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}
