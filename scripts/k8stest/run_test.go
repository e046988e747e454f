package k8stest

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// runner runs a pod's containers as local processes, as the kubelet would
// run them in the pod, with the documented substitutions (doc.go).
type runner struct {
	t        *testing.T
	dir      string
	net      *network
	secrets  map[string]map[string][]byte
	programs map[string]string // a container's command[0] → the local program
	procs    []*proc
}

// proc is one running container.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // valid once done is closed
}

// startPod lays out the pod's volumes, runs its init containers to their
// end (each must exit 0, as the kubelet requires) and starts its containers.
func (r *runner) startPod(p pod) error {
	if err := os.MkdirAll(filepath.Join(r.dir, p.name), 0o755); err != nil {
		return err
	}
	vols, err := volumes(r.dir, p, r.secrets)
	if err != nil {
		return err
	}
	for _, c := range p.spec.InitContainers {
		cmd, err := r.command(p, c, vols)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return err
		}
		kill := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
		err = cmd.Wait()
		kill.Stop()
		if err != nil {
			return fmt.Errorf("pod %s init container %s: %w\n%s", p.name, c.Name, err, &out)
		}
	}
	for _, c := range p.spec.Containers {
		cmd, err := r.command(p, c, vols)
		if err != nil {
			return err
		}
		if err := r.start(p.name+"/"+c.Name, cmd); err != nil {
			return err
		}
	}
	return nil
}

// start starts cmd, its output to a log file.
func (r *runner) start(name string, cmd *exec.Cmd) error {
	log := filepath.Join(r.dir, strings.ReplaceAll(name, "/", "_")+".log")
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	r.procs = append(r.procs, p)
	return nil
}

// stopAll sends every container SIGTERM, as the kubelet does, and kills
// what has not stopped 30 s later; on a failed test it shows their logs.
func (r *runner) stopAll() {
	for _, p := range r.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range slices.Backward(r.procs) {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			r.t.Errorf("%s did not stop within 30 s of SIGTERM", p.name)
		}
		if r.t.Failed() {
			out, _ := os.ReadFile(p.log)
			r.t.Logf("== %s (exit: %v)\n%s", p.name, p.err, out)
		}
	}
}

// command is container c of pod p as a local command: its command and
// args with the program mapped, mount paths as the volumes' directories
// and pod-network addresses as loopback ones, in its environment alone.
func (r *runner) command(p pod, c corev1.Container, vols map[string]string) (*exec.Cmd, error) {
	what := fmt.Sprintf("pod %s container %s", p.name, c.Name)
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(c.Command) == 0 {
		return nil, fmt.Errorf("%s: no command (the base names each container's program)", what)
	}
	prog, ok := r.programs[argv[0]]
	if !ok {
		return nil, fmt.Errorf("%s: no local program for %s", what, argv[0])
	}
	subst := func(s string) (string, error) { return r.net.rewrite(p.name, mountPaths(s, c.VolumeMounts, vols)) }
	for i := range argv[1:] {
		v, err := subst(argv[i+1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		argv[i+1] = v
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range c.Env {
		v, err := envValue(p, e)
		if err == nil {
			v, err = subst(v)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", what, e.Name, err)
		}
		env = append(env, e.Name+"="+v)
	}
	cmd := exec.Command(prog, argv[1:]...)
	cmd.Env, cmd.Dir = env, filepath.Join(r.dir, p.name)
	return cmd, nil
}

// envValue is e's value in pod p: a literal, or the downward API's.
func envValue(p pod, e corev1.EnvVar) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	if f := e.ValueFrom.FieldRef; f != nil {
		if f.FieldPath == "metadata.name" {
			return p.name, nil
		}
		if m := regexp.MustCompile(`^metadata\.labels\['([^']+)'\]$`).FindStringSubmatch(f.FieldPath); m != nil {
			if v, ok := p.labels[m[1]]; ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("field %s: not one this test provides", f.FieldPath)
	}
	return "", fmt.Errorf("valueFrom %+v: not one this test provides", e.ValueFrom)
}

// mountPaths replaces each mount path in s (a whole path component) with
// its volume's directory, in one pass (a directory may itself contain a
// mount path, as /tmp).
func mountPaths(s string, mounts []corev1.VolumeMount, vols map[string]string) string {
	if len(mounts) == 0 {
		return s
	}
	dirs := map[string]string{}
	var alts []string
	for _, m := range mounts {
		dirs[m.MountPath] = vols[m.Name]
		alts = append(alts, regexp.QuoteMeta(m.MountPath))
	}
	slices.SortFunc(alts, func(a, b string) int { return len(b) - len(a) }) // the longest first
	re := regexp.MustCompile(`(` + strings.Join(alts, "|") + `)(/|$|[\s"'])`)
	return re.ReplaceAllStringFunc(s, func(match string) string {
		m := re.FindStringSubmatch(match)
		return dirs[m[1]] + m[2]
	})
}

// ready reports whether container c of pod p passes its readiness probe.
func (r *runner) ready(p pod, c corev1.Container) (bool, string) {
	pr := c.ReadinessProbe
	if pr == nil {
		return true, ""
	}
	var portName string
	switch {
	case pr.HTTPGet != nil:
		portName = pr.HTTPGet.Port.String()
	case pr.TCPSocket != nil:
		portName = pr.TCPSocket.Port.String()
	default:
		return false, "a probe this test does not run"
	}
	cport, err := containerPort(p.spec, portName, 0)
	if err != nil {
		return false, err.Error()
	}
	port, err := r.net.local(p.name, cport)
	if err != nil {
		return false, err.Error()
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if pr.TCPSocket != nil {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	}
	return httpProbe(strings.ToLower(string(pr.HTTPGet.Scheme)), addr, pr.HTTPGet.Path)
}

// httpProbe: as the kubelet's, a status of 200-399 passes and the
// certificate of an https probe is not checked.
func httpProbe(scheme, addr, path string) (bool, string) {
	if scheme == "" {
		scheme = "http"
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet's probes
	}}
	resp, err := client.Get(scheme + "://" + addr + path)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400, resp.Status
}
