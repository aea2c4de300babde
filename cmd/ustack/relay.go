package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/sandbox"
)

// A confined run serves its sandbox in a relay process of its own, as
// slirp4netns's --enable-sandbox and pasta do: this process (the
// supervisor) opens the namespace and its device, then starts this
// program again as the relay, in new mount and PID namespaces (and a user
// namespace of its own without root, where it is root mapped to the
// caller), handing it the device's descriptors and a spec. The relay
// serves the device, opens what it needs from the host (the capture file,
// the API socket, the port forwards' and the metrics' listeners), then
// isolates itself (sandbox.Isolate: an empty root) and confines itself
// (sandbox.Confine: nobody's uid as root, no capability but binding low
// ports, a seccomp allow-list) before it reports ready. The supervisor,
// which touches no traffic, keeps the namespace, runs the command, and
// passes signals on; the relay dies with it.

// relayEnv marks this program, started again, as a relay process.
const relayEnv = "USTACK_RELAY"

// The relay's descriptors, as exec.Cmd.ExtraFiles numbers them from 3:
// the spec to read, the status to write ("ok", or an error), the
// lifeline (its end means the supervisor is gone), then the device's
// queues.
const (
	relaySpecFD = 3 + iota
	relayStatusFD
	relayLifelineFD
	relayDeviceFD
)

// relaySpec is what the supervisor hands its relay.
type relaySpec struct {
	Name     string
	Config   sandbox.Config
	Device   sandbox.Device // FDs as the relay numbers them
	API      string         // the API socket's path, "" for none
	Metrics  string         // the metrics' address, "" for none
	Pcap     string         // the capture file, "" for none
	Stats    bool           // write the counters at the end
	Procs    int            // GOMAXPROCS, 0 for Go's default
	Profiles [2]string      // CPU profile and execution trace files, "" for none
}

// confined is a relay process serving the sandbox for this one.
type confined struct {
	name   string
	api    string // the API socket's path, which the isolated relay cannot remove
	ns     *sandbox.Namespace
	dev    string
	cmd    *exec.Cmd
	life   *os.File      // the lifeline's write end; closing it stops the relay
	exited chan struct{} // closed once the relay has exited
	exit   error         // the relay's exit, once exited is closed
	once   sync.Once
}

// startConfined opens the namespace and starts the relay, and returns
// once the relay reports ready.
func (r *sandboxRun) startConfined(stderr io.Writer) (server, error) {
	if !asCommand {
		return nil, errors.New("a confined sandbox's relay is this program started again: only the ustack command can confine it (turn confinement off in tests)")
	}
	ns, err := sandbox.OpenNamespace(&r.cfg)
	if err != nil {
		return nil, err
	}
	for _, w := range ns.Warnings() {
		fmt.Fprintf(stderr, "%s: %s\n", r.name, w)
	}
	dev, err := ns.TakeDevice()
	if err != nil {
		ns.Close()
		return nil, err
	}
	c, err := r.startRelay(ns, dev, stderr) // which takes dev's descriptors over
	if err != nil {
		ns.Close()
		return nil, err
	}
	return c, nil
}

// startRelay starts the relay over dev and waits for its word. It takes
// dev's descriptors over: the relay has its copies.
func (r *sandboxRun) startRelay(ns *sandbox.Namespace, dev sandbox.Device, stderr io.Writer) (*confined, error) {
	spec := relaySpec{
		Name: r.name, Config: ns.Config(), Device: dev,
		API: r.apiSocket, Metrics: r.metrics, Pcap: r.pcap, Stats: r.stats, Procs: r.procs,
		Profiles: [2]string{r.cpuProfile, r.traceFile},
	}
	if !r.procsSet && os.Getenv("GOMAXPROCS") != "" {
		spec.Procs = 0 // an explicit $GOMAXPROCS wins over the default
	}
	// The relay's files: the three pipes' ends, then the device's
	// descriptors, which startRelay owns from here on.
	files := make([]*os.File, 3, 3+len(dev.FDs))
	for _, fd := range dev.FDs {
		files = append(files, os.NewFile(uintptr(fd), "device"))
	}
	closeAll := func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}
	defer closeAll()
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	defer specW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		specR.Close()
		return nil, fmt.Errorf("relay: %w", err)
	}
	defer statusR.Close()
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		specR.Close()
		statusW.Close()
		return nil, fmt.Errorf("relay: %w", err)
	}
	files[0], files[1], files[2] = specR, statusW, lifeR
	spec.Device.FDs = nil
	for i := range dev.FDs {
		spec.Device.FDs = append(spec.Device.FDs, relayDeviceFD+i)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		lifeW.Close()
		return nil, fmt.Errorf("relay: %w", err)
	}
	cmd := exec.Command(selfPath())
	cmd.Args = []string{r.name + " relay"} // what ps shows
	cmd.Env = append(relayEnviron(r.sysmonTick), relayEnv+"=1")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		// Its own process group: a terminal's Ctrl-C is for the command,
		// which ends, and then this process stops the relay.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if os.Geteuid() != 0 {
		// Without root, mount and PID namespaces take a user namespace,
		// where the relay is root mapped to the caller: it owns nothing
		// more than the caller does, on the host.
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	}
	c := &confined{name: r.name, api: r.apiSocket, ns: ns, dev: dev.Name, cmd: cmd, life: lifeW, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The relay dies with the thread that started it (Pdeathsig),
		// so that thread waits for it and is not given back.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.exit = cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		lifeW.Close()
		return nil, fmt.Errorf("start the relay: %w: mount and PID namespaces (and, without root, a user namespace) may not be available here; run unconfined", err)
	}
	closeAll()
	files = nil
	if _, err := specW.Write(js); err != nil {
		c.stop()
		return nil, fmt.Errorf("relay: hand over its spec: %w", err)
	}
	specW.Close()
	status, err := bufio.NewReader(statusR).ReadString('\n')
	if status != "ok\n" {
		c.stop()
		if status = strings.TrimSpace(status); status == "" {
			status = fmt.Sprintf("ended before it was ready (%v; %v)", err, c.exit)
		}
		return nil, errors.New(status)
	}
	return c, nil
}

func (c *confined) device() string          { return c.dev }
func (c *confined) failed() <-chan struct{} { return c.exited }

func (c *confined) err() error {
	select {
	case <-c.exited:
		return fmt.Errorf("the relay ended (%v)", c.exit)
	default:
		return nil
	}
}

func (c *confined) runCommand(cmd *exec.Cmd, started func(*os.Process)) error {
	return c.ns.Run(cmd, started)
}

// relayStopWait bounds how long a relay that was told to stop (it closes
// every flow and writes its counters) may take before it is killed: a
// limit for a hang, not a timing.
const relayStopWait = 10 * time.Second

// stop tells the relay to stop and waits for it, then lets the
// namespace go.
func (c *confined) stop() {
	c.once.Do(func() {
		c.life.Close()
		t := time.NewTimer(relayStopWait)
		defer t.Stop()
		select {
		case <-c.exited:
		case <-t.C:
			c.cmd.Process.Kill()
			<-c.exited
		}
		if c.api != "" {
			// The relay closed its listener, but could not unlink the
			// socket from a root it no longer sees.
			if fi, err := os.Lstat(c.api); err == nil && fi.Mode()&os.ModeSocket != 0 {
				os.Remove(c.api)
			}
		}
		c.ns.Close()
	})
}

// relayEnviron is the relay's environment: this one's, with the
// runtime's monitor on its slow tick if asked (see execWithSysmonTick).
func relayEnviron(sysmonTick bool) []string {
	env := os.Environ()
	if !sysmonTick {
		return env
	}
	godebug, _ := os.LookupEnv("GODEBUG")
	for _, s := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(s), "schedtrace=") {
			return env // an explicit setting wins
		}
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			out = append(out, kv)
		}
	}
	if godebug != "" {
		return append(out, "GODEBUG="+godebug+","+sysmonTickSetting)
	}
	return append(out, "GODEBUG="+sysmonTickSetting)
}

// relayMain is the relay process: it serves the device it was handed,
// isolates and confines itself, reports ready, and serves until its
// supervisor goes. It returns the process's exit status.
func relayMain() int {
	os.Unsetenv(relayEnv)
	status := os.NewFile(relayStatusFD, "relay-status")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(status, format+"\n", a...)
		status.Close()
		return 1
	}
	var spec relaySpec
	specF := os.NewFile(relaySpecFD, "relay-spec")
	err := json.NewDecoder(specF).Decode(&spec)
	specF.Close()
	if err != nil {
		return fail("relay: read its spec: %v", err)
	}
	if spec.Procs > 0 {
		runtime.GOMAXPROCS(spec.Procs)
	}
	// Ctrl-C and hang-ups are the supervisor's to pass on; this process
	// stops when its lifeline ends.
	signal.Ignore(os.Interrupt, syscall.SIGHUP)
	stopProfiles, err := startProfiles(spec.Profiles[0], spec.Profiles[1])
	if err != nil {
		return fail("%v", err)
	}
	defer stopProfiles()
	cfg := spec.Config
	if spec.Pcap != "" {
		f, err := os.Create(spec.Pcap)
		if err != nil {
			return fail("capture: %v", err)
		}
		defer f.Close()
		cfg.Capture = f
	}
	sb, err := sandbox.Serve(&cfg, spec.Device)
	if err != nil {
		return fail("%v", err)
	}
	defer func() {
		if err := sb.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: close: %v\n", spec.Name, err)
		}
		if spec.Stats {
			writeTunStats(os.Stderr, spec.Name, sb.Stats())
		}
	}()
	for _, w := range sb.Warnings() {
		fmt.Fprintf(os.Stderr, "%s: %s\n", spec.Name, w)
	}
	if spec.Metrics != "" {
		m, err := metrics.Serve(spec.Metrics, metrics.NewFunc(sb.Metrics()), metrics.NewStack(sb.Stack()))
		if err != nil {
			return fail("%v", err)
		}
		defer m.Close()
	}
	if spec.API != "" {
		if err := sb.ServeAPI(spec.API); err != nil {
			return fail("API socket: %v", err)
		}
	}
	// Non-blocking before os.NewFile, so that the runtime's poller waits
	// on it rather than a thread.
	if err := syscall.SetNonblock(relayLifelineFD, true); err != nil {
		return fail("relay: lifeline: %v", err)
	}
	life := os.NewFile(relayLifelineFD, "relay-lifeline")
	if err := sandbox.Isolate(); err != nil {
		return fail("%v", err)
	}
	if err := sb.Confine(); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintln(status, "ok")
	status.Close()
	// Until the supervisor closes the lifeline, or dies.
	life.Read(make([]byte, 1))
	return 0
}
