package k8stest

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// pod is one pod a StatefulSet or Deployment of the base makes.
type pod struct {
	name    string // as Kubernetes names it: tpcoord-agent-1 (a Deployment's: NAME-0, NAME-1, …)
	owner   string // the StatefulSet or Deployment
	ordinal int
	labels  map[string]string
	spec    corev1.PodSpec
}

// pods lists the pods of the base's StatefulSets and Deployments, by name.
func (r *rendered) pods() []pod {
	var out []pod
	add := func(name string, replicas *int32, tmpl corev1.PodTemplateSpec, index bool) {
		n := 1
		if replicas != nil {
			n = int(*replicas)
		}
		for i := range n {
			l := maps.Clone(tmpl.Labels)
			if index { // the StatefulSet controller's label (Kubernetes 1.28+)
				l["apps.kubernetes.io/pod-index"] = strconv.Itoa(i)
			}
			out = append(out, pod{name: fmt.Sprintf("%s-%d", name, i), owner: name, ordinal: i, labels: l, spec: tmpl.Spec})
		}
	}
	for name, s := range r.statefulSets {
		add(name, s.Spec.Replicas, s.Spec.Template, true)
	}
	for name, d := range r.deployments {
		add(name, d.Spec.Replicas, d.Spec.Template, false)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// network stands in for the pod network: every pod is 127.0.0.1, each of
// its container ports a free local port of its own.
type network struct {
	r     *rendered
	pods  map[string]pod
	ports map[string]int // "POD:CONTAINERPORT" → local port
}

func newNetwork(r *rendered) (*network, error) {
	n := &network{r: r, pods: map[string]pod{}, ports: map[string]int{}}
	for _, p := range r.pods() {
		n.pods[p.name] = p
		for _, c := range p.spec.Containers {
			for _, cp := range c.Ports {
				key := fmt.Sprintf("%s:%d", p.name, cp.ContainerPort)
				if _, ok := n.ports[key]; ok {
					continue // the same port over TCP and UDP
				}
				port, err := freePort(slices.Collect(maps.Values(n.ports)))
				if err != nil {
					return nil, err
				}
				n.ports[key] = port
			}
		}
	}
	return n, nil
}

// freePort returns a port free on 127.0.0.1 for TCP and UDP (memberlist
// uses both), not in taken.
func freePort(taken []int) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err != nil || slices.Contains(taken, port) {
			continue
		}
		u.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1")
}

// local returns pod's container port as a loopback port.
func (n *network) local(pod string, port int32) (int, error) {
	p, ok := n.ports[fmt.Sprintf("%s:%d", pod, port)]
	if !ok {
		return 0, fmt.Errorf("pod %s has no container port %d", pod, port)
	}
	return p, nil
}

// hostPort matches HOST:PORT in a setting (a URL's too).
var hostPort = regexp.MustCompile(`\b([a-z0-9](?:[a-z0-9.-]*[a-z0-9])?):([0-9]+)\b`)

// rewrite replaces every HOST:PORT in s that the pod network would resolve
// (0.0.0.0 in pod self; a Service's name; POD.SERVICE of a headless one)
// with 127.0.0.1 and the local port.
func (n *network) rewrite(self, s string) (string, error) {
	var err error
	out := hostPort.ReplaceAllStringFunc(s, func(m string) string {
		sub := hostPort.FindStringSubmatch(m)
		port, _ := strconv.Atoi(sub[2])
		target, cport, ok, e := n.resolve(self, sub[1], int32(port))
		if e != nil {
			err = e
		}
		if !ok || e != nil {
			return m
		}
		local, e := n.local(target, cport)
		if e != nil {
			err = e
			return m
		}
		return fmt.Sprintf("127.0.0.1:%d", local)
	})
	return out, err
}

// resolve names the pod and container port host:port reaches, if host is
// one the pod network knows.
func (n *network) resolve(self, host string, port int32) (string, int32, bool, error) {
	if host == "0.0.0.0" {
		return self, port, true, nil
	}
	if podName, svcName, ok := strings.Cut(host, "."); ok {
		svc := n.r.services[svcName]
		if _, known := n.pods[podName]; svc == nil || !known || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			return "", 0, false, nil
		}
		return podName, port, true, nil
	}
	svc := n.r.services[host]
	if svc == nil {
		return "", 0, false, nil
	}
	for _, p := range n.r.pods() { // the Service's first pod
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.labels)) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if sp.Port == port {
				cport, err := containerPort(p.spec, sp.TargetPort.String(), port)
				return p.name, cport, err == nil, err
			}
		}
		return "", 0, false, fmt.Errorf("service %s has no port %d", host, port)
	}
	return "", 0, false, fmt.Errorf("service %s selects no pod", host)
}

// containerPort resolves a port name (or number) of spec's containers.
func containerPort(spec corev1.PodSpec, name string, dflt int32) (int32, error) {
	if name == "" || name == "0" {
		return dflt, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		return int32(n), nil
	}
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort, nil
			}
		}
	}
	return 0, fmt.Errorf("no container port named %q", name)
}

// volumes stands in for the kubelet's volumes: a Secret's keys become files
// of the test's Secrets (mode defaultMode), an emptyDir a directory of the
// pod's own.
func volumes(dir string, p pod, secrets map[string]map[string][]byte) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range p.spec.Volumes {
		d := filepath.Join(dir, p.name, v.Name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		out[v.Name] = d
		switch {
		case v.EmptyDir != nil:
		case v.Secret != nil:
			if err := secretFiles(d, v.Secret, secrets[v.Secret.SecretName]); err != nil {
				return nil, fmt.Errorf("pod %s volume %s: %w", p.name, v.Name, err)
			}
		default:
			return nil, fmt.Errorf("pod %s volume %s: a kind this test does not lay out", p.name, v.Name)
		}
	}
	return out, nil
}

// secretFiles writes the Secret's keys (or those of its items) into d.
func secretFiles(d string, s *corev1.SecretVolumeSource, data map[string][]byte) error {
	if data == nil {
		return fmt.Errorf("no Secret %s", s.SecretName)
	}
	mode := os.FileMode(0o644)
	if s.DefaultMode != nil {
		mode = os.FileMode(*s.DefaultMode)
	}
	items := s.Items
	if len(items) == 0 {
		for _, k := range slices.Sorted(maps.Keys(data)) {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("Secret %s has no key %s", s.SecretName, it.Key)
		}
		if err := os.WriteFile(filepath.Join(d, it.Path), b, mode); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(d, it.Path), mode); err != nil { // past the umask
			return err
		}
	}
	return nil
}
