package pcap_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/pcap"
)

// TestTcpdumpReads writes captures of both link types to files and has
// tcpdump -r read them: every record is a packet it decodes, with the
// addresses, ports and lengths that were sent, including one cut at a
// small snap length.
func TestTcpdumpReads(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		testenv.Skip(t, "tcpdump is not installed (Debian package tcpdump): %v", err)
	}
	for _, c := range []struct {
		name  string
		lower func() gstack.LinkEndpoint
		flags []string
		want  []string
	}{
		{"raw IP", func() gstack.LinkEndpoint { return linktest.NewEndpoint(nil) }, nil, []string{
			"IP 198.18.0.1.1000 > 198.18.0.2.9: UDP, length 72",
			"IP6 fd00::1.2000 > fd00::2.9: UDP, length 1392",
			"IP 198.18.0.1.3000 > 198.18.0.2.9: UDP, length 1972",
		}},
		{"Ethernet", func() gstack.LinkEndpoint { return ethernet{linktest.NewEndpoint(nil)} }, []string{"-e"}, []string{
			"02:00:00:00:00:01 > 02:00:00:00:00:02, ethertype IPv4 (0x0800), length 114: 198.18.0.1.1000 > 198.18.0.2.9: UDP, length 72",
			"02:00:00:00:00:01 > 02:00:00:00:00:02, ethertype IPv6 (0x86dd), length 1454: fd00::1.2000 > fd00::2.9: UDP, length 1392",
			"02:00:00:00:00:01 > 02:00:00:00:00:02, ethertype IPv4 (0x0800), length 2014: 198.18.0.1.3000 > 198.18.0.2.9: UDP, length 1972",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "capture.pcap")
			f, err := os.Create(path)
			require.NoError(t, err)
			ep, err := pcap.New(c.lower(), f, &pcap.Options{SnapLen: 1500})
			require.NoError(t, err)
			for _, pkt := range []struct {
				b   []byte
				hdr int
			}{
				{ipPacket(false, 1000, 100), header.IPv4MinimumSize},
				{ipPacket(true, 2000, 1440), header.IPv6MinimumSize},
				{ipPacket(false, 3000, 2000), header.IPv4MinimumSize}, // longer than the snap length
			} {
				p := outgoing(pkt.b, pkt.hdr)
				ep.AddHeader(p)
				require.Equal(t, 1, write(ep, p))
			}
			ep.Close()
			require.NoError(t, f.Close())
			require.Equal(t, pcap.Counts{Packets: 3, Bytes: ep.Counts().Bytes, Truncated: 1}, ep.Counts())

			out, err := exec.Command(tcpdump, append([]string{"-r", path, "-nn", "-t"}, c.flags...)...).CombinedOutput()
			require.NoError(t, err, "tcpdump -r: %s", out)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if !strings.HasPrefix(l, "reading from file") {
					got = append(got, l)
				}
			}
			require.Equal(t, c.want, got, "tcpdump said:\n%s", out)
		})
	}
}
