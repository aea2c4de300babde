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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ustack-dev/ustack/sandbox"
)

// A confined command serves its traffic from a relay process of its own,
// as slirp4netns's --enable-sandbox and pasta do: this process (the
// supervisor) does what needs the host (opening a sandbox's namespace and
// device, say), then starts this program again as the relay, in new mount
// and PID namespaces (and a user namespace of its own without root, where
// it is root mapped to the caller), handing it a spec and descriptors.
// The relay opens what it needs from the host (files, listeners), then
// isolates itself (sandbox.Isolate: an empty root) and confines itself
// (sandbox.ConfineProcess: nobody's uid as root, no capability but
// binding low ports, a seccomp allow-list) before it reports ready. The
// supervisor, which touches no traffic, keeps what it opened, runs
// commands and passes signals on; the relay dies with it. Each kind of
// relay (relays) is one command's serving half.

// relayEnv marks this program, started again, as a relay process: its
// value is the relay's kind and the number of its own descriptors,
// "KIND/N", and "KIND/N/detached" for a relay that outlives its
// supervisor (relayOptions.detach).
const relayEnv = "USTACK_RELAY"

// relayDetached is relayEnv's suffix for a detached relay.
const relayDetached = "/detached"

// The relay's descriptors, as exec.Cmd.ExtraFiles numbers them from 3:
// the spec to read, the status to write ("ok", or an error), the
// lifeline (its end means the supervisor is gone), then the kind's own.
const (
	relaySpecFD = 3 + iota
	relayStatusFD
	relayLifelineFD
	relayFilesFD
)

// relayFunc is a kind of relay: it serves what spec says with fds (the
// kind's descriptors, from relayFilesFD on, which it owns), calls ready once it has
// opened what it needs (ready isolates the process, runs confine and
// tells the supervisor), then serves until stop is closed, and returns
// the process's exit status. Its failures before ready are returned as
// errors, which the supervisor reports.
type relayFunc func(spec []byte, fds []int, ready func(confine func() error) error, stop <-chan struct{}) error

// relays are the kinds of relay this program serves.
var relays = map[string]relayFunc{
	"sandbox": sandboxRelay,
	"wg":      wgRelay,
}

// relayOptions say how a relay is started.
type relayOptions struct {
	// sysmonTick runs it with the runtime's monitor on its slow tick
	// (execWithSysmonTick).
	sysmonTick bool
	// stderr is its standard output and error (a detached relay's until
	// it is ready).
	stderr io.Writer
	// detach: the relay outlives this process, as pasta's forks into the
	// background: in a session of its own, without a lifeline or a
	// parent-death signal; once ready, its standard output and error are
	// /dev/null, so that a caller reading this process's output to its
	// end is not held; it stops on SIGTERM or SIGINT, or what its kind
	// watches. This process lets it go (relayProc.release).
	detach bool
}

// relayProc is a relay process this one started and supervises.
type relayProc struct {
	cmd    *exec.Cmd
	life   *os.File      // the lifeline's write end; closing it stops the relay
	exited chan struct{} // closed once the relay has exited
	exit   error         // the relay's exit, once exited is closed
	once   sync.Once
	// detached: the relay outlives this process (relayOptions.detach).
	detached bool
}

// startRelay starts this program again as a relay of kind, named name in
// ps, handing it spec and files (which it takes over), and returns once
// the relay reports ready, or with what it reported instead.
func startRelay(name, kind string, spec any, files []*os.File, o relayOptions) (*relayProc, error) {
	all := append(make([]*os.File, 3, 3+len(files)), files...)
	closeAll := func() {
		for _, f := range all {
			if f != nil {
				f.Close()
			}
		}
	}
	defer closeAll()
	if !asCommand {
		return nil, errors.New("a confined relay is this program started again: only the ustack command can confine it (turn confinement off in tests)")
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	var pipes [3][2]*os.File // spec, status, lifeline
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range pipes[:i] {
				p[0].Close()
				p[1].Close()
			}
			return nil, fmt.Errorf("relay: %w", err)
		}
		pipes[i] = [2]*os.File{r, w}
	}
	specW, statusR, lifeW := pipes[0][1], pipes[1][0], pipes[2][1]
	defer specW.Close()
	defer statusR.Close()
	all[0], all[1], all[2] = pipes[0][0], pipes[1][1], pipes[2][0]
	attr, err := relayProcAttr(o.detach)
	if err != nil {
		for _, p := range pipes {
			p[0].Close()
			p[1].Close()
		}
		return nil, err
	}
	cmd := exec.Command(selfPath())
	cmd.Args = []string{name + " relay"} // what ps shows
	env := fmt.Sprintf("%s=%s/%d", relayEnv, kind, len(files))
	if o.detach {
		env += relayDetached
	}
	cmd.Env = append(relayEnviron(o.sysmonTick), env)
	cmd.Stdout, cmd.Stderr = o.stderr, o.stderr
	cmd.ExtraFiles = all
	cmd.SysProcAttr = attr
	p := &relayProc{cmd: cmd, life: lifeW, exited: make(chan struct{}), detached: o.detach}
	started := make(chan error, 1)
	go func() {
		// The relay dies with the thread that started it (Pdeathsig,
		// unless detached), so that thread waits for it and is not given
		// back.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.exit = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		lifeW.Close()
		return nil, fmt.Errorf("start the relay: %w: mount and PID namespaces (and, without root, a user namespace) may not be available here; run unconfined", err)
	}
	closeAll()
	all = nil
	if _, err := specW.Write(js); err != nil {
		p.stop()
		return nil, fmt.Errorf("relay: hand over its spec: %w", err)
	}
	specW.Close()
	status, err := bufio.NewReader(statusR).ReadString('\n')
	if status != "ok\n" {
		p.stop()
		if status = strings.TrimSpace(status); status == "" {
			status = fmt.Sprintf("the relay ended before it was ready (%v; %v)", err, p.exit)
		}
		return nil, errors.New(status)
	}
	return p, nil
}

// failed is closed once the relay has exited.
func (p *relayProc) failed() <-chan struct{} { return p.exited }

// err says how the relay ended, once it has: nil while it runs, or if
// it ended by itself with status 0 (what its kind watched went away:
// pasta's namespace).
func (p *relayProc) err() error {
	select {
	case <-p.exited:
		if p.exit == nil {
			return nil
		}
		return fmt.Errorf("the relay ended (%v)", p.exit)
	default:
		return nil
	}
}

// pid is the relay's process ID, in this process's PID namespace.
func (p *relayProc) pid() int { return p.cmd.Process.Pid }

// release lets a detached relay go on alone, as this process exits:
// the lifeline, which it does not watch, is closed, and it is not
// waited for.
func (p *relayProc) release() {
	p.once.Do(func() { p.life.Close() })
}

// relayStopWait bounds how long a relay that was told to stop (it closes
// every flow and writes its counters) may take before it is killed: a
// limit for a hang, not a timing.
const relayStopWait = 10 * time.Second

// stop tells the relay to stop and waits for it. Idempotent.
func (p *relayProc) stop() {
	p.once.Do(func() {
		p.life.Close()
		t := time.NewTimer(relayStopWait)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			p.cmd.Process.Kill()
			<-p.exited
		}
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

// relayMain is a relay process: it runs its kind over the spec and files
// it was handed until its supervisor goes, and returns the process's
// exit status.
func relayMain() int {
	kind, count, _ := strings.Cut(os.Getenv(relayEnv), "/")
	count, detached := strings.CutSuffix(count, relayDetached)
	os.Unsetenv(relayEnv)
	status := os.NewFile(relayStatusFD, "relay-status")
	reported := false
	report := func(msg string) {
		if !reported {
			reported = true
			fmt.Fprintln(status, msg)
			status.Close()
		}
	}
	relay, ok := relays[kind]
	if !ok {
		report(fmt.Sprintf("relay: unknown kind %q", kind))
		return 1
	}
	specF := os.NewFile(relaySpecFD, "relay-spec")
	spec, err := io.ReadAll(specF)
	specF.Close()
	if err != nil {
		report(fmt.Sprintf("relay: read its spec: %v", err))
		return 1
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 {
		report(fmt.Sprintf("relay: %s=%s: want KIND/N", relayEnv, os.Getenv(relayEnv)))
		return 1
	}
	fds := make([]int, n)
	for i := range fds {
		fds[i] = relayFilesFD + i
	}
	// The lifeline's end (the supervisor closed it, or died) stops the
	// relay, and so does SIGTERM, which is how a caller stops a detached
	// relay (pasta's daemon, by its PID file). Ctrl-C and hang-ups are
	// the supervisor's to pass on to its command, but a detached relay
	// has none and stops on SIGINT too. These goroutines are the
	// process's: they end with it.
	var stopOnce sync.Once
	stop := make(chan struct{})
	stopNow := func() { stopOnce.Do(func() { close(stop) }) }
	sigs := make(chan os.Signal, 1)
	go func() {
		<-sigs
		stopNow()
	}()
	var devNull *os.File
	if detached {
		signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
		signal.Ignore(syscall.SIGHUP)
		// Opened now: the isolated relay sees no /dev.
		var err error
		if devNull, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
			report(fmt.Sprintf("relay: %v", err))
			return 1
		}
		syscall.Close(relayLifelineFD) // not watched: the supervisor exits once this relay is ready
	} else {
		signal.Notify(sigs, syscall.SIGTERM)
		signal.Ignore(os.Interrupt, syscall.SIGHUP)
		// Non-blocking before os.NewFile, so that the runtime's poller
		// waits on it rather than a thread.
		if err := syscall.SetNonblock(relayLifelineFD, true); err != nil {
			report(fmt.Sprintf("relay: lifeline: %v", err))
			return 1
		}
		life := os.NewFile(relayLifelineFD, "relay-lifeline")
		go func() {
			life.Read(make([]byte, 1)) // until the supervisor closes it, or dies
			stopNow()
		}()
	}
	ready := func(confine func() error) error {
		if err := sandbox.Isolate(); err != nil {
			return err
		}
		if err := confine(); err != nil {
			return err
		}
		report("ok")
		if devNull != nil {
			// Whoever reads the supervisor's output to its end is not
			// held by this process, which outlives it.
			onStdout(devNull)
		}
		return nil
	}
	if err := relay(spec, fds, ready, stop); err != nil {
		if reported {
			fmt.Fprintf(os.Stderr, "relay: %v\n", err)
		}
		report(err.Error())
		return 1
	}
	return 0
}
