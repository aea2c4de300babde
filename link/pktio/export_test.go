package pktio

// BlockedReads returns how many Reads are waiting for the stack to send
// something: a test that must act while a Read is blocked waits for it
// to count one, instead of sleeping and hoping.
func BlockedReads(e *Endpoint) int {
	e.tx.mu.Lock()
	defer e.tx.mu.Unlock()
	return e.tx.readers
}
