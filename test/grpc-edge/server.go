package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// serve runs the reference: a stock grpc-go server of the CloudProvider service over mutual TLS,
// with grpc-go's defaults except where our server has a setting grpc-go also has (the streams per
// connection). Each method answers an empty message (the cases compare status codes, not bodies);
// NodeGroupForNode, NodeGroups and Refresh are served, every other method is unknown to it.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	address := fs.String("address", "127.0.0.1:0", "HOST:PORT to listen on")
	certFile := fs.String("tls-cert", "", "PEM server certificate")
	keyFile := fs.String("tls-key", "", "PEM server key")
	caFile := fs.String("client-ca", "", "PEM CA that signs client certificates (required of every client)")
	maxStreams := fs.Uint("max-concurrent-streams", 100, "SETTINGS_MAX_CONCURRENT_STREAMS (grpc-go's default: unlimited)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cert, pool, err := loadTLS(*certFile, *keyFile, *caFile)
	if err != nil {
		return err
	}
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	desc := grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil)}
	for _, name := range []string{"NodeGroupForNode", "NodeGroups", "Refresh"} {
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var req frame
				if err := dec(&req); err != nil {
					return nil, err
				}
				return &frame{}, nil
			},
		})
	}
	lis, err := net.Listen("tcp", *address)
	if err != nil {
		return err
	}
	//nolint:staticcheck // the pass-through codec needs the v1 codec interface
	srv := grpc.NewServer(grpc.Creds(creds), grpc.MaxConcurrentStreams(uint32(*maxStreams)), grpc.ForceServerCodec(passThrough{}))
	srv.RegisterService(&desc, struct{}{})
	fmt.Printf("listening on %s\n", lis.Addr())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		srv.Stop()
	}()
	return srv.Serve(lis)
}
