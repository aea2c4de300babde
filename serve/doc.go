// Package serve runs a ustack host on a real interface as a small server:
// TCP and UDP echo and discard services, an HTTP server (/bytes/N streams
// N bytes of a cheap stream that CheckBody verifies, / is a status page),
// and Prometheus metrics of every counter the host keeps (package
// metrics). It is what `ustack serve` runs, and what the integration and
// reliability tests aim traffic at. The same services run on the host
// kernel's sockets (Config.Kernel, `ustack serve -stack kernel`), so that
// ustack is measured against the kernel with one handler.
package serve
