// Command autoscaler-floor is the cheapest server of cluster-autoscaler's externalgrpc protocol we
// can think of: grpc-go with a pass-through codec, every answer encoded once at start-up and looked
// up in a map per call, nothing else. It serves the node groups `npm run bench autoscaler` writes
// into the API server (GROUPS deployments NAMESPACE/pool-G of PER_GROUP nodes pool-G-mI with
// providerID PREFIX+pool-G-mI), so the benchmark can run the same cluster-autoscaler against it and
// against our server and compare the loop times: what is left over the floor is our server's cost.
//
// The messages are written and read with protowire by field number, after protos/externalgrpc.proto
// of this repository (the wire format the autoscaler 1.35+ speaks). Where our server answers
// UNIMPLEMENTED (pricing, per-group options, templates of groups whose class does not exist) this
// one does too, so the autoscaler makes the same calls against both.
//
// Usage: autoscaler-floor --address=127.0.0.1:0 --groups=100 --per-group=50
// It prints "listening on HOST:PORT" once serving. On SIGUSR1 it prints one line
// "stats cpu_us=CPU METHOD=CALLS ..." (its CPU time so far and the calls served by method, from
// the start), so that a benchmark can take the difference over a window; SIGTERM or SIGINT print
// the same line and stop it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
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

// group is one node group and its answers, re-encoded only when a scaling call changes its size.
type group struct {
	id        string
	min, max  int32
	target    atomic.Pointer[frame] // NodeGroupTargetSizeResponse
	forNode   atomic.Pointer[frame] // NodeGroupForNodeResponse
	instances frame                 // NodeGroupNodesResponse
	mu        sync.Mutex
	size      int32
}

type floor struct {
	groups   []*group
	byID     map[string]*group
	byNode   map[string]*group // providerID and node name
	list     atomic.Pointer[frame]
	listMu   sync.Mutex
	empty    frame
	notFound frame // NodeGroupForNodeResponse{nodeGroup: {id: ""}}
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// nodeGroup encodes NodeGroup{id, minSize, maxSize, debug} as our server words it.
func (g *group) nodeGroup(size int32) []byte {
	var b []byte
	b = appendString(b, 1, g.id)
	b = appendVarint(b, 2, uint64(g.min))
	b = appendVarint(b, 3, uint64(g.max))
	return appendString(b, 4, fmt.Sprintf("%s (%d:%d, replicas=%d)", g.id, g.min, g.max, size))
}

// encode refreshes the answers that depend on the group's size; called with mu held.
func (g *group) encode() {
	target := frame(appendVarint(nil, 1, uint64(g.size)))
	g.target.Store(&target)
	forNode := frame(appendMessage(nil, 1, g.nodeGroup(g.size)))
	g.forNode.Store(&forNode)
}

func (f *floor) encodeList() {
	f.listMu.Lock()
	defer f.listMu.Unlock()
	var b []byte
	for _, g := range f.groups {
		g.mu.Lock()
		b = appendMessage(b, 1, g.nodeGroup(g.size))
		g.mu.Unlock()
	}
	list := frame(b)
	f.list.Store(&list)
}

func newFloor(namespace, prefix string, groups, perGroup int) *floor {
	f := &floor{byID: map[string]*group{}, byNode: map[string]*group{}, empty: frame{}}
	f.notFound = frame(appendMessage(nil, 1, nil))
	for gi := 0; gi < groups; gi++ {
		name := fmt.Sprintf("pool-%d", gi)
		g := &group{id: namespace + "/" + name, min: 0, max: int32(perGroup * 2), size: int32(perGroup)}
		var inst []byte
		for mi := 0; mi < perGroup; mi++ {
			node := fmt.Sprintf("%s-m%d", name, mi)
			providerID := prefix + node
			f.byNode[providerID] = g
			f.byNode[node] = g
			status := appendVarint(nil, 1, 1) // instanceRunning
			var one []byte
			one = appendString(one, 1, providerID)
			one = appendMessage(one, 2, status)
			inst = appendMessage(inst, 1, one)
		}
		g.instances = frame(inst)
		g.encode()
		f.groups = append(f.groups, g)
		f.byID[g.id] = g
	}
	f.encodeList()
	return f
}

// field returns the bytes of the first length-delimited field num of a message, or nil.
func field(msg []byte, num protowire.Number) []byte {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return nil
			}
			return v
		}
		m := protowire.ConsumeFieldValue(n, typ, msg)
		if m < 0 {
			return nil
		}
		msg = msg[m:]
	}
	return nil
}

// varint returns the first varint field num of a message, or 0.
func varint(msg []byte, num protowire.Number) int64 {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return 0
		}
		msg = msg[l:]
		if n == num && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(msg)
			if m < 0 {
				return 0
			}
			return int64(int32(v))
		}
		m := protowire.ConsumeFieldValue(n, typ, msg)
		if m < 0 {
			return 0
		}
		msg = msg[m:]
	}
	return 0
}

var (
	errNoPricing  = status.Error(codes.Unimplemented, "pricing is not served")
	errNoOptions  = status.Error(codes.Unimplemented, "per-group autoscaling options are not served")
	errNoTemplate = status.Error(codes.Unimplemented, "no template: the group's MachineClass does not exist")
)

// idOf rewrites a scaling request whose group id is field num into the id-only shape group() reads.
func idOf(req frame, num protowire.Number) frame {
	return frame(appendString(nil, 1, string(field(req, num))))
}

func (f *floor) group(req frame) (*group, error) {
	g := f.byID[string(field(req, 1))]
	if g == nil {
		return nil, status.Errorf(codes.NotFound, "node group %q is not served", field(req, 1))
	}
	return g, nil
}

// resize changes a group's size by delta within its limits (the floor keeps no machines).
func (f *floor) resize(req frame, delta int64) (*frame, error) {
	g, err := f.group(req)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	size := int64(g.size) + delta
	if size < int64(g.min) || size > int64(g.max) {
		g.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument, "size %d outside %d:%d", size, g.min, g.max)
	}
	g.size = int32(size)
	g.encode()
	g.mu.Unlock()
	f.encodeList()
	return &f.empty, nil
}

func (f *floor) answers() map[string]func(frame) (*frame, error) {
	empty := func(frame) (*frame, error) { return &f.empty, nil }
	return map[string]func(frame) (*frame, error){
		"NodeGroups": func(frame) (*frame, error) { return f.list.Load(), nil },
		"NodeGroupForNode": func(req frame) (*frame, error) {
			node := field(req, 1)
			g := f.byNode[string(field(node, 1))]
			if g == nil {
				g = f.byNode[string(field(node, 2))]
			}
			if g == nil {
				return &f.notFound, nil
			}
			return g.forNode.Load(), nil
		},
		"PricingNodePrice":     func(frame) (*frame, error) { return nil, errNoPricing },
		"PricingPodPrice":      func(frame) (*frame, error) { return nil, errNoPricing },
		"GPULabel":             empty,
		"GetAvailableGPUTypes": empty,
		"Cleanup":              empty,
		"Refresh":              empty,
		"NodeGroupTargetSize": func(req frame) (*frame, error) {
			g, err := f.group(req)
			if err != nil {
				return nil, err
			}
			return g.target.Load(), nil
		},
		"NodeGroupIncreaseSize": func(req frame) (*frame, error) {
			return f.resize(idOf(req, 2), varint(req, 1))
		},
		"NodeGroupDeleteNodes": func(req frame) (*frame, error) {
			nodes := int64(0)
			for msg := []byte(req); len(msg) > 0; {
				n, typ, l := protowire.ConsumeTag(msg)
				if l < 0 {
					break
				}
				msg = msg[l:]
				m := protowire.ConsumeFieldValue(n, typ, msg)
				if m < 0 {
					break
				}
				if n == 1 {
					nodes++
				}
				msg = msg[m:]
			}
			return f.resize(idOf(req, 2), -nodes)
		},
		"NodeGroupDecreaseTargetSize": func(req frame) (*frame, error) {
			return f.resize(idOf(req, 2), varint(req, 1))
		},
		"NodeGroupNodes": func(req frame) (*frame, error) {
			g, err := f.group(req)
			if err != nil {
				return nil, err
			}
			return &g.instances, nil
		},
		"NodeGroupTemplateNodeInfo": func(frame) (*frame, error) { return nil, errNoTemplate },
		"NodeGroupGetOptions":       func(frame) (*frame, error) { return nil, errNoOptions },
	}
}

func main() {
	address := flag.String("address", "127.0.0.1:0", "HOST:PORT to listen on")
	namespace := flag.String("namespace", "default", "namespace of the node groups (ids are NAMESPACE/pool-G)")
	groups := flag.Int("groups", 100, "node groups")
	perGroup := flag.Int("per-group", 50, "nodes per group")
	prefix := flag.String("provider-prefix", "virtual://bench/", "providerID of node N is PREFIX+N")
	flag.Parse()

	f := newFloor(*namespace, *prefix, *groups, *perGroup)
	answers := f.answers()
	names := make([]string, 0, len(answers))
	for name := range answers {
		names = append(names, name)
	}
	sort.Strings(names)
	counts := make([]atomic.Int64, len(names))
	desc := grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil)}
	for i, name := range names {
		answer, count := answers[name], &counts[i]
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var req frame
				if err := dec(&req); err != nil {
					return nil, err
				}
				count.Add(1)
				return answer(req)
			},
		})
	}
	lis, err := net.Listen("tcp", *address)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	//nolint:staticcheck // the pass-through codec needs the v1 codec interface
	srv := grpc.NewServer(grpc.ForceServerCodec(passThrough{}))
	srv.RegisterService(&desc, struct{}{})
	fmt.Printf("listening on %s\n", lis.Addr())
	stats := func() {
		line := "stats"
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
			line += fmt.Sprintf(" cpu_us=%d", (ru.Utime.Nano()+ru.Stime.Nano())/1e3)
		}
		for i, name := range names {
			line += fmt.Sprintf(" %s=%d", name, counts[i].Load())
		}
		fmt.Println(line)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for sig := range signals {
			stats()
			if sig != syscall.SIGUSR1 {
				srv.Stop()
				return
			}
		}
	}()
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
