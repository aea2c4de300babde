package stack_test

import "syscall"

// wantNoNet is what TranslateError gives for gVisor's ErrNoNet here.
const wantNoNet = syscall.ENONET
