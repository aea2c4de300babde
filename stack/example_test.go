package stack_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"

	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/stack"
)

// newHost builds a userspace host with one address on link.
func newHost(link *mem.Endpoint, addr string) *stack.Stack {
	st, err := stack.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	nic, err := st.AddNIC(link, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := st.AddAddress(nic, netip.MustParsePrefix(addr)); err != nil {
		log.Fatal(err)
	}
	return st
}

// An HTTP client and server, each on its own userspace stack, joined by
// an in-memory link: no kernel socket, no privilege. Any link endpoint
// (TUN, AF_PACKET) takes the place of the in-memory one unchanged.
func Example_httpClient() {
	clientLink, serverLink, err := mem.Pair(nil)
	if err != nil {
		log.Fatal(err)
	}
	client := newHost(clientLink, "198.18.0.1/24")
	defer client.Close()
	server := newHost(serverLink, "198.18.0.2/24")
	defer server.Close()

	ln, err := server.Listen("tcp", ":80")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "hello, %s", host)
	})}
	go srv.Serve(ln)
	defer srv.Close()

	// The stack dials as net.Dialer does, so http.Transport takes it as is.
	tr := &http.Transport{DialContext: client.DialContext}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://198.18.0.2/")
	if err != nil {
		log.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Status, string(body))
	// Output: 200 OK hello, 198.18.0.1
}
