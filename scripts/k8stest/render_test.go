package k8stest

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// baseDir is the kustomize base under test.
const baseDir = "../../configs/k8s"

// rendered is the base as kustomize builds it, every object decoded into
// its k8s.io/api type.
type rendered struct {
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet
	deployments  map[string]*appsv1.Deployment
}

// render builds dir with kustomize (as kubectl kustomize does) and decodes
// every object strictly: a field its type does not have, or a kind this
// test does not know, is an error.
func render(dir string) (*rendered, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	r := &rendered{services: map[string]*corev1.Service{}, statefulSets: map[string]*appsv1.StatefulSet{}, deployments: map[string]*appsv1.Deployment{}}
	for _, res := range m.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			return nil, err
		}
		if err := r.add(res.GetKind(), res.GetName(), y); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// add decodes one object of kind strictly and files it under name.
func (r *rendered) add(kind, name string, y []byte) error {
	var obj any
	switch kind {
	case "Service":
		s := &corev1.Service{}
		r.services[name], obj = s, s
	case "StatefulSet":
		s := &appsv1.StatefulSet{}
		r.statefulSets[name], obj = s, s
	case "Deployment":
		d := &appsv1.Deployment{}
		r.deployments[name], obj = d, d
	default:
		return fmt.Errorf("%s %s: a kind this test does not decode", kind, name)
	}
	if err := yaml.UnmarshalStrict(y, obj); err != nil {
		return fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return nil
}

// TestRenderStrict: every object of the base decodes strictly, and a field
// no type has is refused (the decoding can fail).
func TestRenderStrict(t *testing.T) {
	r, err := render(baseDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.services) != 3 || len(r.statefulSets) != 2 || len(r.deployments) != 1 {
		t.Errorf("rendered %d Services, %d StatefulSets, %d Deployments; want 3, 2, 1", len(r.services), len(r.statefulSets), len(r.deployments))
	}
	bad := []byte("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec: {replica: 2}\n")
	if err := r.add("StatefulSet", "x", bad); err == nil {
		t.Errorf("a StatefulSet with spec.replica (not replicas) decoded without error")
	}
}

// TestBaseShape: what the base promises beyond decoding: the ranks'
// StatefulSet starts every pod at once, takes the rank from the pod index
// and the world size from its replicas, joins through a headless Service
// that lists pods before they are ready; the keys come from Secrets as
// files (no Secret in an environment variable); pods run as non-root.
func TestBaseShape(t *testing.T) {
	r, err := render(baseDir)
	if err != nil {
		t.Fatal(err)
	}
	agents := r.statefulSets["tpcoord-agent"]
	if agents == nil {
		t.Fatal("no StatefulSet tpcoord-agent")
	}
	if agents.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("tpcoord-agent podManagementPolicy %q; want Parallel (no rank is ready before all have joined)", agents.Spec.PodManagementPolicy)
	}
	headless := r.services[agents.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("the agents' Service %q: %+v; want headless, publishing not-ready addresses", agents.Spec.ServiceName, headless)
	}
	main := agents.Spec.Template.Spec.Containers[0]
	rank, world := envVar(main, "TPC_RANK"), envVar(main, "TPC_WORLD_SIZE")
	if rank == nil || rank.ValueFrom == nil || rank.ValueFrom.FieldRef == nil || rank.ValueFrom.FieldRef.FieldPath != "metadata.labels['apps.kubernetes.io/pod-index']" {
		t.Errorf("TPC_RANK: %+v; want the pod-index label", rank)
	}
	if world == nil || agents.Spec.Replicas == nil || world.Value != fmt.Sprint(*agents.Spec.Replicas) {
		t.Errorf("TPC_WORLD_SIZE %+v, replicas %v: they must agree", world, agents.Spec.Replicas)
	}
	for _, pod := range r.pods() {
		checkPodSecurity(t, pod.name, pod.spec)
	}
}

// envVar returns c's variable name, or nil.
func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// checkPodSecurity: non-root, and Secrets only as files.
func checkPodSecurity(t *testing.T, name string, spec corev1.PodSpec) {
	t.Helper()
	sc := spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("%s: pod securityContext %+v; want runAsNonRoot and a non-zero runAsUser", name, sc)
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				t.Errorf("%s/%s: %s comes from a Secret in the environment; mount it as a file", name, c.Name, e.Name)
			}
		}
		if len(c.EnvFrom) > 0 {
			t.Errorf("%s/%s: envFrom %+v; the settings are listed, Secrets mounted", name, c.Name, c.EnvFrom)
		}
	}
}
