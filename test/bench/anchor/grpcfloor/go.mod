// The Go floor of `npm run bench autoscaler`: a minimal externalgrpc server (main.go). Its own
// module, so that the gardener anchor's module above does not change; built by
// `bash hack/tools.sh autoscaler-floor`.
module local.test/autoscaler-floor

go 1.26.2

require (
	google.golang.org/grpc v1.81.1
	google.golang.org/protobuf v1.36.11
)

require (
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
)
