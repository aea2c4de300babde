// Package depcheck holds only a test: that the library packages an
// embedder imports (stack, link/..., sched, poll, cache, forward/...)
// never bring in the command's dependencies (plots, progress bars,
// Prometheus). It has no API.
package depcheck
