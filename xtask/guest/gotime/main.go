// gotime calls time.Now in a loop until the given number of seconds pass or it is sent
// SIGTERM, then prints how many calls it made: seed 004's Go service, whose clock
// reads leave the vDSO when the clocksource has no vDSO mode. `cargo xtask clock-vm`
// builds it with CGO_ENABLED=0, traces it with `probe syscalls --comm gotime` and
// stops it with SIGTERM once the trace is over, so that it runs through the whole
// trace however long probe takes to load in a slow guest.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gotime SECONDS")
		os.Exit(2)
	}
	seconds, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil || seconds <= 0 {
		fmt.Fprintf(os.Stderr, "gotime: SECONDS %q: want a positive number\n", os.Args[1])
		os.Exit(2)
	}
	var stop int32
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-terms
		atomic.StoreInt32(&stop, 1)
	}()
	start := time.Now()
	deadline := start.Add(time.Duration(seconds * float64(time.Second)))
	calls := 0
	for atomic.LoadInt32(&stop) == 0 {
		calls++
		if time.Now().After(deadline) {
			break
		}
	}
	fmt.Printf("calls %d\nseconds %.2f\n", calls, time.Since(start).Seconds())
}
