// Command tpu-device-plugin is the fake TPU device plugin of the local cluster's real node
// (`e2e/cluster up --real-node`). It speaks the kubelet's device plugin API v1beta1 as GKE's TPU
// device plugin does: it registers the extended resource google.com/tpu, advertises --chips
// chips, and on Allocate hands a container one device node per chip at /dev/accel<N> (the accel
// driver's names, which libtpu and `tpujob-operator preflight` look for) plus the environment
// GKE's plugin sets (TPU_VISIBLE_CHIPS, TPU_CHIPS_PER_HOST_BOUNDS, TPU_HOST_BOUNDS,
// TPU_ACCELERATOR_TYPE, TPU_SKIP_MDS_QUERY).
//
// The chips are character devices made under --dev-dir with the numbers of /dev/null, so a
// container that opens one reads nothing and writes nowhere. Two files, re-read every
// --poll, play a failing chip:
//
//	--unhealthy-file  chip numbers, one per line or separated by commas: ListAndWatch reports
//	                  them Unhealthy (the kubelet lowers allocatable google.com/tpu) and their
//	                  device nodes disappear from --dev-dir, as a chip that drops off the bus;
//	                  removed from the file, they come back.
//	--hidden-file     chip numbers that Allocate leaves out of a container's devices while
//	                  reporting them Healthy: the container asked for 4 chips and sees 3, as with
//	                  a chip whose driver binding broke. Pre-flight's accelerator item fails.
//	                  Read by every Allocate call.
//
// When the kubelet restarts (its registration socket is made again) the plugin serves on a new
// socket and registers again.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	chips          int
	devDir         string
	unhealthyFile  string
	hiddenFile     string
	acceleratorEnv string
	chipBounds     string

	mu        sync.Mutex
	unhealthy map[int]bool
	hidden    map[int]bool
	changed   chan struct{} // closed and replaced whenever the health of a chip changes
}

// chipSet reads a file of chip numbers ("" or missing: none). Numbers outside [0, chips) are
// logged and ignored.
func (p *plugin) chipSet(file string) map[int]bool {
	set := map[int]bool{}
	if file == "" {
		return set
	}
	data, err := os.ReadFile(file)
	if err != nil {
		if !os.IsNotExist(err) {
			log.Printf("cannot read %s: %v", file, err)
		}
		return set
	}
	for _, field := range strings.FieldsFunc(string(data), func(r rune) bool {
		return r == ',' || r == '\n' || r == ' ' || r == '\t' || r == '\r'
	}) {
		n, err := strconv.Atoi(field)
		if err != nil || n < 0 || n >= p.chips {
			log.Printf("%s: ignoring %q (want chip numbers 0..%d)", file, field, p.chips-1)
			continue
		}
		set[n] = true
	}
	return set
}

func (p *plugin) devicePath(chip int) string {
	return filepath.Join(p.devDir, "accel"+strconv.Itoa(chip))
}

// syncDeviceNodes makes the device node of every healthy chip and removes those of unhealthy ones.
func (p *plugin) syncDeviceNodes(unhealthy map[int]bool) error {
	for chip := 0; chip < p.chips; chip++ {
		path := p.devicePath(chip)
		if unhealthy[chip] {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				return err
			}
			continue
		}
		if _, err := os.Lstat(path); err == nil {
			continue
		}
		// The numbers of /dev/null (1, 3): harmless to open, read and write.
		if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, int(1<<8|3)); err != nil {
			return fmt.Errorf("mknod %s: %w", path, err)
		}
		if err := os.Chmod(path, 0o666); err != nil {
			return err
		}
	}
	return nil
}

// poll re-reads the two files and, when the unhealthy set changed, updates the device nodes and
// wakes ListAndWatch.
func (p *plugin) poll() {
	unhealthy := p.chipSet(p.unhealthyFile)
	hidden := p.chipSet(p.hiddenFile)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !reflect.DeepEqual(hidden, p.hidden) {
		log.Printf("hidden chips (left out of Allocate): %v", sortedChips(hidden))
		p.hidden = hidden
	}
	if reflect.DeepEqual(unhealthy, p.unhealthy) {
		return
	}
	if err := p.syncDeviceNodes(unhealthy); err != nil {
		// Keep the old state, so that the next poll tries again.
		log.Printf("device nodes: %v (retrying)", err)
		return
	}
	log.Printf("unhealthy chips: %v", sortedChips(unhealthy))
	p.unhealthy = unhealthy
	close(p.changed)
	p.changed = make(chan struct{})
}

func sortedChips(set map[int]bool) []int {
	chips := make([]int, 0, len(set))
	for c := range set {
		chips = append(chips, c)
	}
	sort.Ints(chips)
	return chips
}

func (p *plugin) devices() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	devices := make([]*pluginapi.Device, 0, p.chips)
	for chip := 0; chip < p.chips; chip++ {
		health := pluginapi.Healthy
		if p.unhealthy[chip] {
			health = pluginapi.Unhealthy
		}
		devices = append(devices, &pluginapi.Device{ID: strconv.Itoa(chip), Health: health})
	}
	return devices, p.changed
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		devices, changed := p.devices()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	// Read now rather than at the last poll, so that a file written just before a pod is created
	// applies to that pod.
	hidden := p.chipSet(p.hiddenFile)
	resp := &pluginapi.AllocateResponse{}
	for _, container := range req.ContainerRequests {
		var chips []int
		for _, id := range container.DevicesIds {
			chip, err := strconv.Atoi(id)
			if err != nil || chip < 0 || chip >= p.chips {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			chips = append(chips, chip)
		}
		sort.Ints(chips)
		out := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		visible := make([]string, 0, len(chips))
		for _, chip := range chips {
			visible = append(visible, strconv.Itoa(chip))
			if hidden[chip] {
				continue
			}
			out.Devices = append(out.Devices, &pluginapi.DeviceSpec{
				ContainerPath: "/dev/accel" + strconv.Itoa(chip),
				HostPath:      p.devicePath(chip),
				Permissions:   "rw",
			})
		}
		out.Envs["TPU_VISIBLE_CHIPS"] = strings.Join(visible, ",")
		out.Envs["TPU_CHIPS_PER_HOST_BOUNDS"] = p.chipBounds
		out.Envs["TPU_HOST_BOUNDS"] = "1,1,1"
		out.Envs["TPU_ACCELERATOR_TYPE"] = p.acceleratorEnv
		out.Envs["TPU_SKIP_MDS_QUERY"] = "true"
		log.Printf("allocate chips %v (%d device nodes, hidden %v)", chips, len(out.Devices), sortedChips(hidden))
		resp.ContainerResponses = append(resp.ContainerResponses, out)
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve listens on the plugin's socket in dir and registers with the kubelet there.
func serve(p *plugin, dir, endpoint, resource string) (*grpc.Server, error) {
	socket := filepath.Join(dir, endpoint)
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() {
		if err := server.Serve(listener); err != nil {
			log.Printf("serving %s: %v", socket, err)
		}
	}()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		server.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		server.Stop()
		return nil, fmt.Errorf("register with the kubelet: %w", err)
	}
	return server, nil
}

// kubeletSocketID identifies the kubelet's registration socket (changes when a restarted kubelet
// makes it again); "" when it does not exist.
func kubeletSocketID(dir string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "kubelet.sock"), &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d", st.Dev, st.Ino, st.Ctim.Nano())
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	p := &plugin{changed: make(chan struct{})}
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device plugin directory (kubelet.sock)")
	endpoint := flag.String("endpoint", "tpujob-fake-tpu.sock", "the plugin's socket name in --plugin-dir")
	resource := flag.String("resource", "google.com/tpu", "the extended resource to register")
	flag.IntVar(&p.chips, "chips", 4, "chips on this host")
	flag.StringVar(&p.devDir, "dev-dir", "", "host directory for the chips' device nodes accel<N> (required)")
	flag.StringVar(&p.unhealthyFile, "unhealthy-file", "", "file of chip numbers reported Unhealthy")
	flag.StringVar(&p.hiddenFile, "hidden-file", "", "file of chip numbers left out of Allocate")
	flag.StringVar(&p.acceleratorEnv, "accelerator-type", "v5litepod-4", "TPU_ACCELERATOR_TYPE given to containers")
	flag.StringVar(&p.chipBounds, "chip-bounds", "2,2,1", "TPU_CHIPS_PER_HOST_BOUNDS given to containers")
	poll := flag.Duration("poll", 250*time.Millisecond, "how often the two files are re-read")
	flag.Parse()
	if p.devDir == "" || p.chips < 1 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: tpu-device-plugin --dev-dir DIR [--chips N] [--plugin-dir DIR] [--unhealthy-file F] [--hidden-file F]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	if err := os.MkdirAll(p.devDir, 0o755); err != nil {
		log.Fatal(err)
	}
	p.unhealthy = p.chipSet(p.unhealthyFile)
	p.hidden = p.chipSet(p.hiddenFile)
	if err := p.syncDeviceNodes(p.unhealthy); err != nil {
		log.Fatal(err)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	ticker := time.NewTicker(*poll)
	defer ticker.Stop()
	var server *grpc.Server
	registered := ""
	for {
		if id := kubeletSocketID(*dir); id != "" && id != registered {
			if server != nil {
				server.Stop()
				server = nil
			}
			s, err := serve(p, *dir, *endpoint, *resource)
			if err != nil {
				log.Printf("%v (retrying)", err)
			} else {
				server, registered = s, id
				log.Printf("registered %s with %d chips at %s (devices under %s)", *resource, p.chips,
					filepath.Join(*dir, *endpoint), p.devDir)
			}
		}
		select {
		case <-stop:
			if server != nil {
				server.Stop()
			}
			_ = os.Remove(filepath.Join(*dir, *endpoint))
			return
		case <-ticker.C:
			p.poll()
		}
	}
}
