// The seed 002 server's shape: an SNTP responder in Go, on one UDP socket (the
// version that dropped requests at peak) or on N SO_REUSEPORT sockets opened through
// net.ListenConfig's Control hook (the fix), one goroutine reading each.
//
//	go run . -listen 127.0.0.1:1123 -sockets 4
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const ntpEpochOffset = 2208988800

// SO_REUSEPORT on Linux x86_64 and arm64 (the seed took it from golang.org/x/sys/unix;
// the standard syscall package does not export it).
const soReusePort = 0xf

func ntpTime(t time.Time) uint64 {
	secs := uint64(t.Unix()) + ntpEpochOffset
	frac := (uint64(t.Nanosecond()) << 32) / 1e9
	return secs<<32 | frac
}

func listen(address string, reuseport bool) (*net.UDPConn, error) {
	config := net.ListenConfig{}
	if reuseport {
		config.Control = func(network, address string, conn syscall.RawConn) error {
			var setErr error
			err := conn.Control(func(fd uintptr) {
				setErr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
			})
			if err != nil {
				return err
			}
			return setErr
		}
	}
	conn, err := config.ListenPacket(context.Background(), "udp", address)
	if err != nil {
		return nil, err
	}
	return conn.(*net.UDPConn), nil
}

func serve(conn *net.UDPConn) {
	request := make([]byte, 1024)
	reply := make([]byte, 48)
	for {
		n, client, err := conn.ReadFromUDP(request)
		if err != nil {
			return
		}
		received := ntpTime(time.Now())
		if n < 48 || request[0]&7 != 3 {
			continue
		}
		version := (request[0] >> 3) & 7
		reply[0] = version<<3 | 4 // LI 0, mode 4 (server)
		reply[1] = 2              // stratum
		reply[2] = request[2]     // poll
		reply[3] = 0xe8           // precision 2^-24
		copy(reply[12:16], "LOCL")
		binary.BigEndian.PutUint64(reply[16:24], received)
		copy(reply[24:32], request[40:48]) // origin = client's transmit
		binary.BigEndian.PutUint64(reply[32:40], received)
		binary.BigEndian.PutUint64(reply[40:48], ntpTime(time.Now()))
		conn.WriteToUDP(reply, client)
	}
}

func main() {
	address := flag.String("listen", "127.0.0.1:1123", "address to serve")
	sockets := flag.Int("sockets", 1, "SO_REUSEPORT sockets (1: one plain socket)")
	flag.Parse()
	var bound string
	for i := 0; i < *sockets; i++ {
		addr := *address
		if bound != "" {
			addr = bound
		}
		conn, err := listen(addr, *sockets > 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, "go-ntp:", err)
			os.Exit(1)
		}
		bound = conn.LocalAddr().String()
		go serve(conn)
	}
	fmt.Printf("go-ntp: serving on %s (%d sockets)\n", bound, *sockets)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
