package sandbox_test

import (
	"fmt"
	"log"
	"os"
	"os/exec"

	"github.com/ustack-dev/ustack/sandbox"
)

// A program that runs a command in a sandbox whose only network is ustack:
// the body of Example is its main. The command reaches the host's
// loopback at the gateway, 198.18.0.1, resolves names through ustack's
// DNS relay, and is reached from the host at 127.0.0.1:8080, forwarded to
// its port 80.
//
// The example is compiled, not run: it needs root (CAP_NET_ADMIN, and
// CAP_SYS_ADMIN to create the namespace).
func Example() {
	// First thing in main: when this process is the sandbox's re-executed
	// helper (Config.ResolvConf), Init becomes the command and never
	// returns; otherwise it returns at once.
	sandbox.Init()

	fwd, err := sandbox.ParsePortForward("8080:80") // host 127.0.0.1:8080 -> sandbox port 80
	if err != nil {
		log.Fatal(err)
	}
	cfg := sandbox.Config{
		AllowHostLoopback: true, // off by default: the host's loopback is unreachable
		ResolvConf:        true, // the command's /etc/resolv.conf names ustack's DNS relay
		PortForwards:      []sandbox.PortForward{fwd},
	}
	// Check refuses a bad configuration before anything is created.
	if err := cfg.Check(); err != nil {
		log.Fatal(err)
	}
	sb, err := sandbox.New(&cfg) // a new namespace, its TUN device and the relay
	if err != nil {
		log.Fatal(err)
	}
	// Close ends every flow, removes the device and joins every goroutine.
	defer sb.Close()

	cmd := exec.Command("curl", "-s", "http://198.18.0.1:8000/")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err = sb.Run(cmd, func(p *os.Process) {
		log.Printf("sandboxed pid %d; host forwards at %v", p.Pid, sb.PortForwardAddrs())
	})
	st := sb.Stats()
	fmt.Printf("%d TCP flows relayed, %d bytes up, %d down\n", st.TCPOpened, st.TCPBytesUp, st.TCPBytesDown)
	if err != nil {
		log.Printf("curl in the sandbox: %v", err) // not Fatal: Close must run
	}
}
