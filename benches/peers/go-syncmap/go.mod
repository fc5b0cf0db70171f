module ioserve.invalid/peers/go-syncmap

go 1.21
