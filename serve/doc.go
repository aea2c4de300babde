// Package serve runs a ustack host on a real interface as a small server:
// TCP and UDP echo and discard services, an HTTP server (/bytes/N streams
// N deterministic bytes, / is a status page), and Prometheus metrics of
// every counter the host keeps (package metrics). It is what `ustack serve` runs, and what
// the integration and reliability tests aim traffic at.
package serve
