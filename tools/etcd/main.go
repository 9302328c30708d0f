// Command etcd is etcd's own server main, built from the Go module proxy for the envtest-based tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
