// Package poll is ustack's busy polling: a reader whose socket is empty
// does not park at once but, for a short budget, runs bounded non-blocking
// receive rounds of its links itself, from its own goroutine, and checks
// its socket after each (Linux's napi_busy_loop). It stops as soon as data
// is ready, the budget is spent, or, unless the mode says otherwise, other
// goroutines are waiting to run: spinning then only delays the goroutine
// that would produce the data (the 2014 netdev rule "exit busy loop when
// another process is runnable").
//
// A link takes part by implementing Source. While a reader polls it, a
// Source keeps its own receive goroutine parked (prefer-busy-poll) and
// re-arms it when the reader stops, or when the Poller's watchdog finds
// that the reader stopped polling without saying so.
//
// The stack owns one Poller, shared by its conns; package stack wires it
// in when Options.BusyPoll is not Off.
package poll
