package main

import (
	"fmt"
	"os"
	"time"

	"github.com/engrams/engrams/internal/guestinit"
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "engrams-init: must run as PID 1 inside a VM")
		os.Exit(2)
	}
	err := guestinit.Run()
	fmt.Fprintf(os.Stderr, "engrams-init: fatal: %v\n", err)
	time.Sleep(100 * time.Millisecond) // let the console drain before the panic
	os.Exit(1)
}
