// gotime calls time.Now in a loop for the given number of seconds and prints how many
// calls it made: seed 004's Go service, whose clock reads leave the vDSO when the
// clocksource has no vDSO mode. `cargo xtask clock-vm` builds it with CGO_ENABLED=0
// and traces it with `probe syscalls --comm gotime`.
package main

import (
	"fmt"
	"os"
	"strconv"
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
	deadline := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	calls := 0
	for {
		calls++
		if time.Now().After(deadline) {
			break
		}
	}
	fmt.Printf("calls %d\n", calls)
}
