package wgnet

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzParseAnswer feeds parseAnswer arbitrary responses to an A or AAAA
// query: it must never panic, and what it accepts must hold addresses of
// the asked type only.
func FuzzParseAnswer(f *testing.F) {
	name := dnsmessage.MustNewName("svc.test.")
	for _, seed := range []struct {
		t     dnsmessage.Type
		rcode dnsmessage.RCode
		tc    bool
		addrs []netip.Addr
	}{
		{dnsmessage.TypeA, dnsmessage.RCodeSuccess, false, []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")}},
		{dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, false, []netip.Addr{netip.MustParseAddr("fd00::2")}},
		{dnsmessage.TypeA, dnsmessage.RCodeNameError, false, nil},
		{dnsmessage.TypeA, dnsmessage.RCodeSuccess, true, nil},
		{dnsmessage.TypeAAAA, dnsmessage.RCodeServerFailure, false, nil},
	} {
		q := dnsmessage.Question{Name: name, Type: seed.t, Class: dnsmessage.ClassINET}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, Response: true, RCode: seed.rcode, Truncated: seed.tc})
		b.EnableCompression()
		b.StartQuestions()
		b.Question(q)
		b.StartAnswers()
		h := dnsmessage.ResourceHeader{Name: name, Class: dnsmessage.ClassINET, TTL: 60}
		for _, a := range seed.addrs {
			if a.Is4() {
				b.AResource(h, dnsmessage.AResource{A: a.As4()})
			} else {
				b.AAAAResource(h, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
		msg, err := b.Finish()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg, seed.t == dnsmessage.TypeAAAA)
	}
	f.Fuzz(func(t *testing.T, resp []byte, aaaa bool) {
		q := dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
		if aaaa {
			q.Type = dnsmessage.TypeAAAA
		}
		addrs, truncated, err := parseAnswer(resp, 7, q)
		if err != nil || truncated {
			if len(addrs) != 0 {
				t.Fatalf("addresses %v with truncated %v, error %v", addrs, truncated, err)
			}
			return
		}
		for _, a := range addrs {
			if a.Is4() == aaaa {
				t.Fatalf("address %v for a %v query", a, q.Type)
			}
		}
	})
}
