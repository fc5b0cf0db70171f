module ioserve.invalid/peers/go-ntp

go 1.21
