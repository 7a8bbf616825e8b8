// Command grpc-edge is the gRPC edge conformance suite's Go side (test/integration/grpc-edge.test.ts
// drives it):
//
//	grpc-edge serve --tls-cert=F --tls-key=F --client-ca=F [--address=H:P] [--max-concurrent-streams=100]
//	grpc-edge run --case=NAME --target=H:P --cert=F --key=F --ca=F [--server-name=localhost] [case flags]
//
// serve is the reference, a stock grpc-go server (server.go). run plays one case against a server,
// with grpc-go's own client where the case is something a grpc-go client does, and with
// golang.org/x/net's HTTP/2 transport or framer where the case is something no grpc-go client
// would send (stalled bodies, ping floods, streams past the advertised limit, non-gRPC requests);
// it prints one JSON line {"case", "answer", "figures"}: the answer is what the suite compares
// between the servers, the figures are measurements for the record (cases.go).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

const service = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"

// frame is a message as it travels: the codec neither encodes nor decodes.
type frame []byte

type passThrough struct{}

func (passThrough) Marshal(v any) ([]byte, error) { return *(v.(*frame)), nil }

func (passThrough) Unmarshal(data []byte, v any) error {
	f := v.(*frame)
	*f = append((*f)[:0], data...)
	return nil
}

func (passThrough) Name() string { return "proto" }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: grpc-edge serve|run [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// loadTLS reads a certificate, its key and a CA bundle (PEM files).
func loadTLS(certFile, keyFile, caFile string) (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return cert, nil, err
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return cert, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return cert, nil, fmt.Errorf("%s: no certificate", caFile)
	}
	return cert, pool, nil
}
