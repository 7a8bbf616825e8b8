// Command ca-wire records what one cluster-autoscaler version's own externalgrpc client puts on the
// wire, and what it reads back from the answers our server encodes. hack/ca-wire.sh builds it once
// per pinned autoscaler version, inside that version's Go module (so the client code, the generated
// protos and the Kubernetes types are exactly the release's), and runs it; the output is the set of
// fixtures in test/fixtures/externalgrpc/<version>/ that test/unit/autoscaler/wire-versions.test.ts
// reads.
//
// It starts a gRPC server on 127.0.0.1 that decodes nothing: every request's bytes are recorded and
// every method is answered with the bytes of <dir>/responses/<Method>.bin (UNIMPLEMENTED where
// there is no such file). Then it builds the version's externalgrpc cloud provider against it
// (BuildExternalGrpc with a cloud-config file, as the autoscaler binary does) and calls, through
// the provider's interfaces: NodeGroups, Pricing().NodePrice, Pricing().PodPrice and the group's
// GetOptions, with fixed inputs (below). It writes <dir>/<Method>.bin (the request bytes) and
// <dir>/read-back.json (what the client returned, or its error).
//
// Usage: ca-wire --dir=test/fixtures/externalgrpc/1.36.1 --version=1.36.1
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apiv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider"
	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc"
	"k8s.io/autoscaler/cluster-autoscaler/config"
)

// The inputs, the same for every version; the unit test asserts them as decoded from the bytes.
// The start has nanoseconds on purpose: metav1.Time (the legacy field) carries whole seconds only.
var (
	windowStart = time.Date(2026, time.January, 2, 3, 4, 5, 123456789, time.UTC)
	windowEnd   = windowStart.Add(time.Hour)

	node = &apiv1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "ip-10-0-0-1.ec2.internal",
			Labels: map[string]string{
				"node.kubernetes.io/instance-type": "m5.large",
				"topology.kubernetes.io/zone":      "eu-west-1a",
			},
			Annotations: map[string]string{"example.com/wire": "node"},
		},
		Spec: apiv1.NodeSpec{ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0"},
	}

	pod = &apiv1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default"},
		Spec: apiv1.PodSpec{Containers: []apiv1.Container{
			container("app", "500m", "256Mi"),
			container("sidecar", "100m", "64Mi"),
		}},
	}

	defaults = config.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold:    0.5,
		ScaleDownGpuUtilizationThreshold: 0.6,
		ScaleDownUnneededTime:            10 * time.Minute,
		ScaleDownUnreadyTime:             20 * time.Minute,
		MaxNodeProvisionTime:             15 * time.Minute,
		ZeroOrMaxNodeScaling:             false,
		IgnoreDaemonSetsUtilization:      true,
	}
)

func container(name, cpu, memory string) apiv1.Container {
	return apiv1.Container{
		Name: name,
		Resources: apiv1.ResourceRequirements{Requests: apiv1.ResourceList{
			apiv1.ResourceCPU:    resource.MustParse(cpu),
			apiv1.ResourceMemory: resource.MustParse(memory),
		}},
	}
}

// frame is a message as it travels: the codec neither encodes nor decodes.
type frame []byte

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*frame)), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*frame)) = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// recorder answers every method from canned bytes and keeps the requests.
type recorder struct {
	responses map[string][]byte
	mu        sync.Mutex
	requests  map[string][][]byte
}

func (r *recorder) handle(_ any, stream grpc.ServerStream) error {
	full, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "no method name")
	}
	method := full[strings.LastIndex(full, "/")+1:]
	var req frame
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	r.mu.Lock()
	r.requests[method] = append(r.requests[method], req)
	r.mu.Unlock()
	resp, ok := r.responses[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "ca-wire has no responses/%s.bin", method)
	}
	out := frame(resp)
	return stream.SendMsg(&out)
}

// buildProvider calls the version's BuildExternalGrpc. Its first parameter is
// config.AutoscalingOptions up to 1.34 and *coreoptions.AutoscalerOptions (which embeds it) from
// 1.35; only CloudConfig is read, so it is set by reflection and one source serves every version.
func buildProvider(cloudConfig string) (cloudprovider.CloudProvider, error) {
	build := reflect.ValueOf(externalgrpc.BuildExternalGrpc)
	optsType := build.Type().In(0)
	var opts reflect.Value
	if optsType.Kind() == reflect.Pointer {
		opts = reflect.New(optsType.Elem())
		opts.Elem().FieldByName("CloudConfig").SetString(cloudConfig)
	} else {
		opts = reflect.New(optsType).Elem()
		opts.FieldByName("CloudConfig").SetString(cloudConfig)
	}
	args := []reflect.Value{opts, reflect.ValueOf(cloudprovider.NodeGroupDiscoveryOptions{})}
	for i := 2; i < build.Type().NumIn(); i++ {
		args = append(args, reflect.Zero(build.Type().In(i)))
	}
	provider, ok := build.Call(args)[0].Interface().(cloudprovider.CloudProvider)
	if !ok {
		return nil, errors.New("BuildExternalGrpc returned no CloudProvider")
	}
	return provider, nil
}

// outcome is one call's result as the client returned it.
type outcome struct {
	Value any    `json:"value,omitempty"`
	Error string `json:"error,omitempty"`
}

func result(v any, err error) outcome {
	if err != nil {
		return outcome{Error: err.Error()}
	}
	return outcome{Value: v}
}

// guarded runs one client call; a panic in the client (e.g. a nil field it dereferences) is
// recorded as the call's error, so read-back.json shows it instead of the run dying.
func guarded(call func() outcome) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = outcome{Error: fmt.Sprintf("panic: %v", r)}
		}
	}()
	return call()
}

type readBack struct {
	Version string `json:"version"`
	Sent    struct {
		WindowStart string                             `json:"windowStart"`
		WindowEnd   string                             `json:"windowEnd"`
		Defaults    config.NodeGroupAutoscalingOptions `json:"defaults"`
	} `json:"sent"`
	NodeGroups []map[string]any `json:"nodeGroups"`
	NodePrice  outcome          `json:"nodePrice"`
	PodPrice   outcome          `json:"podPrice"`
	// The options struct of the version as GetOptions returned it (durations in nanoseconds).
	Options outcome `json:"options"`
	// Calls the server saw, by method.
	Calls map[string]int `json:"calls"`
}

func main() {
	dir := flag.String("dir", "", "fixture directory of the version (reads responses/, writes the rest)")
	version := flag.String("version", "", "the autoscaler version this binary was built from")
	flag.Parse()
	if *dir == "" || *version == "" {
		fmt.Fprintln(os.Stderr, "usage: ca-wire --dir=DIR --version=VERSION")
		os.Exit(2)
	}
	if err := run(*dir, *version); err != nil {
		fmt.Fprintln(os.Stderr, "ca-wire:", err)
		os.Exit(1)
	}
}

func run(dir, version string) error {
	rec := &recorder{responses: map[string][]byte{}, requests: map[string][][]byte{}}
	files, err := filepath.Glob(filepath.Join(dir, "responses", "*.bin"))
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		rec.responses[strings.TrimSuffix(filepath.Base(f), ".bin")] = b
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(rec.handle))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	tmp, err := os.MkdirTemp("", "ca-wire-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg := filepath.Join(tmp, "cloud-config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("address: %q\ngrpc_timeout: 10s\n", lis.Addr().String())), 0o600); err != nil {
		return err
	}
	provider, err := buildProvider(cfg)
	if err != nil {
		return err
	}

	var out readBack
	out.Version = version
	out.Sent.WindowStart = windowStart.Format(time.RFC3339Nano)
	out.Sent.WindowEnd = windowEnd.Format(time.RFC3339Nano)
	out.Sent.Defaults = defaults

	groups := provider.NodeGroups()
	for _, g := range groups {
		out.NodeGroups = append(out.NodeGroups, map[string]any{"id": g.Id(), "minSize": g.MinSize(), "maxSize": g.MaxSize()})
	}
	if len(groups) != 1 {
		return fmt.Errorf("the client made %d node groups of responses/NodeGroups.bin, want 1", len(groups))
	}
	pricing, perr := provider.Pricing()
	if perr != nil {
		return perr
	}
	out.NodePrice = guarded(func() outcome { return result(pricing.NodePrice(node, windowStart, windowEnd)) })
	out.PodPrice = guarded(func() outcome { return result(pricing.PodPrice(pod, windowStart, windowEnd)) })
	out.Options = guarded(func() outcome {
		opts, err := groups[0].GetOptions(defaults)
		if err == nil && opts == nil {
			return outcome{Value: "nil (the autoscaler's defaults apply)"}
		}
		return result(opts, err)
	})

	// Every call is unary and has returned; the server has recorded each request.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out.Calls = map[string]int{}
	methods := make([]string, 0, len(rec.requests))
	for m := range rec.requests {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	for _, m := range methods {
		reqs := rec.requests[m]
		out.Calls[m] = len(reqs)
		if err := os.WriteFile(filepath.Join(dir, m+".bin"), reqs[len(reqs)-1], 0o644); err != nil {
			return err
		}
	}
	js, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "read-back.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return nil
}
