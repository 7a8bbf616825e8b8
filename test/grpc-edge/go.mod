// The gRPC edge conformance suite (test/integration/grpc-edge.test.ts): grpc-go clients that drive
// a server through the cases a misbehaving or unlucky client makes, and a stock grpc-go server to
// compare our server with. Its own module; built by `bash hack/tools.sh grpc-edge`.
module local.test/grpc-edge

go 1.26.2

require (
	golang.org/x/net v0.51.0
	google.golang.org/grpc v1.81.1
	google.golang.org/protobuf v1.36.11
)

require (
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
)
