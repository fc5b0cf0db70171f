// The download service of the source document (seed 000): Go's net/http FileServer,
// the baseline the ioserve load test compares with.
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	root := flag.String("root", ".", "directory to serve")
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	http.Handle("/", http.FileServer(http.Dir(*root)))
	log.Printf("serving %s on http://%s/", *root, *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}
