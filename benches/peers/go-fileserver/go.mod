module ioserve.invalid/peers/go-fileserver

go 1.21
