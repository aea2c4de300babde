package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.zx2c4.com/wireguard/device"

	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/sandbox"
)

// sandboxRelaySpec is what a confined sandbox's supervisor hands its
// relay (sandboxRelay).
type sandboxRelaySpec struct {
	Name     string
	Config   sandbox.Config
	Device   sandbox.Device // without descriptors: the relay's files are its queues
	API      string         // the API socket's path, "" for none
	Metrics  string         // the metrics' address, "" for none
	Pcap     string         // the capture file, "" for none
	Stats    bool           // write the counters at the end
	Procs    int            // GOMAXPROCS, 0 for Go's default
	Profiles [2]string      // CPU profile and execution trace files, "" for none
	// Watch: the relay's last descriptor is a namespace watch
	// (openNSWatch), for WatchName ("" for a pidfd); the relay stops,
	// with status 0, once the namespace is gone.
	Watch     bool
	WatchName string
	// WG is the tunnel the flows leave through (-wg), nil for none.
	WG *sandboxWG
}

// confined is a sandbox served by a relay process for this one.
type confined struct {
	*relayProc
	api string // the API socket's path, which the isolated relay cannot remove
	ns  *sandbox.Namespace
	dev string
}

// startConfined opens the namespace and starts the relay over its device,
// and returns once the relay reports ready.
func (r *sandboxRun) startConfined(stderr io.Writer) (server, error) {
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
	spec := sandboxRelaySpec{
		Name: r.name, Config: ns.Config(), Device: dev,
		API: r.apiSocket, Metrics: r.metrics, Pcap: r.pcap, Stats: r.stats, Procs: r.procs,
		Profiles: [2]string{r.cpuProfile, r.traceFile}, WG: r.wg,
	}
	spec.Device.FDs = nil
	if !r.procsSet && os.Getenv("GOMAXPROCS") != "" {
		spec.Procs = 0 // an explicit $GOMAXPROCS wins over the default
	}
	files := make([]*os.File, len(dev.FDs))
	for i, fd := range dev.FDs {
		files[i] = os.NewFile(uintptr(fd), "device")
	}
	if r.quitNetNS != "" || r.quitPID > 0 {
		w, name, err := openNSWatch(r.quitNetNS, r.quitPID)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			ns.Close()
			return nil, err
		}
		files = append(files, w)
		spec.Watch, spec.WatchName = true, name
	}
	p, err := startRelay(r.name, "sandbox", spec, files, relayOptions{sysmonTick: r.sysmonTick, stderr: stderr, detach: r.detach})
	if err != nil {
		ns.Close()
		return nil, err
	}
	return &confined{relayProc: p, api: r.apiSocket, ns: ns, dev: dev.Name}, nil
}

func (c *confined) device() string { return c.dev }

func (c *confined) runCommand(cmd *exec.Cmd, started func(*os.Process)) error {
	return c.ns.Run(cmd, started)
}

// release lets a detached relay go on serving alone, and the namespace
// go from this process (the relay holds the device).
func (c *confined) release() {
	c.relayProc.release()
	c.ns.Close()
}

// stop stops the relay, removes the API socket it could not, and lets
// the namespace go.
func (c *confined) stop() {
	c.relayProc.stop()
	removeRelaySocket(c.api)
	c.ns.Close()
}

// removeRelaySocket removes the unix socket at path ("" for none) that a
// stopped relay listened on: the relay closed its listener, but could
// not unlink the socket from a root it no longer sees.
func removeRelaySocket(path string) {
	if path == "" {
		return
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
}

// sandboxRelay is a confined sandbox's relay: it serves the device it
// was handed, opens the capture file, the metrics' and the API's
// listeners, isolates and confines itself, and serves until stopped.
func sandboxRelay(js []byte, fds []int, ready func(func() error) error, stop <-chan struct{}) error {
	var spec sandboxRelaySpec
	if err := json.Unmarshal(js, &spec); err != nil {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return fmt.Errorf("relay: its spec: %w", err)
	}
	var gone <-chan struct{}
	if spec.Watch {
		if len(fds) < 2 {
			return fmt.Errorf("relay: a namespace watch and no device")
		}
		w, err := watchNS(fds[len(fds)-1], spec.WatchName)
		fds = fds[:len(fds)-1]
		if err != nil {
			for _, fd := range fds {
				syscall.Close(fd)
			}
			return err
		}
		defer w.close()
		gone = w.gone
	}
	spec.Device.FDs = fds
	if spec.Procs > 0 {
		runtime.GOMAXPROCS(spec.Procs)
	}
	stopProfiles, err := startProfiles(spec.Profiles[0], spec.Profiles[1])
	if err != nil {
		return err
	}
	defer stopProfiles()
	cfg := spec.Config
	if spec.Pcap != "" {
		f, err := os.Create(spec.Pcap)
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		defer f.Close()
		cfg.Capture = f
	}
	var wg *device.Device
	if spec.WG != nil {
		if wg, err = spec.WG.open(&cfg, spec.Name, os.Stderr); err != nil {
			for _, fd := range spec.Device.FDs {
				syscall.Close(fd)
			}
			return err
		}
		defer wg.Close() // after the sandbox, whose flows it carries
	}
	sb, err := sandbox.Serve(&cfg, spec.Device) // the queues' files are the sandbox's now
	if err != nil {
		return err
	}
	defer func() {
		if err := sb.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: close: %v\n", spec.Name, err)
		}
		if spec.Stats {
			writeTunStats(os.Stderr, spec.Name, sb.Stats())
			writeWGPeers(os.Stderr, spec.Name, wg)
		}
	}()
	for _, w := range sb.Warnings() {
		fmt.Fprintf(os.Stderr, "%s: %s\n", spec.Name, w)
	}
	if spec.Metrics != "" {
		m, err := metrics.Serve(spec.Metrics, metrics.NewFunc(sb.Metrics()), metrics.NewStack(sb.Stack()))
		if err != nil {
			return err
		}
		defer m.Close()
	}
	if spec.API != "" {
		if err := sb.ServeAPI(spec.API); err != nil {
			return fmt.Errorf("API socket: %w", err)
		}
	}
	if err := ready(sb.Confine); err != nil {
		return err
	}
	select {
	case <-stop:
	case <-gone:
	}
	return nil
}
