package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestLaunchSection(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir, map[string]string{"launch.jsonl": `{"cpu":"x","cores":2,"go":"go1.26","nproc":64,"runs":[{"ready_s":3.4,"cpu_s":5.5,"procs":65,"faults_per_proc":2050,"load1_before":1.2},{"ready_s":2.9,"cpu_s":5.1,"procs":65,"faults_per_proc":2000,"load1_before":1.5}],"ready_p50_s":3.15,"cpu_p50_s":5.3,"cpu_per_proc_p50_ms":81.5,"faults_per_proc_p50":2025,"target_s":3,"target_met":false}
{"cpu":"x","cores":2,"go":"go1.26","nproc":16,"runs":[{"ready_s":0.9,"cpu_s":1.0,"procs":17,"faults_per_proc":1600,"load1_before":1}],"ready_p50_s":0.9,"cpu_p50_s":1,"cpu_per_proc_p50_ms":58.8,"faults_per_proc_p50":1600}
`})
	b := string(section(t, dir))
	for _, want := range []string{
		"| 16 | 0.90 | **0.90** | 1.00 | 59 | 1600 |  |",
		"| 64 | 3.40 / 2.90 | **3.15** | 5.30 | 82 | 2025 | ≤ 3 s: not met |",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("section lacks %q\n%s", want, b)
		}
	}
	if strings.Index(b, "| 16 |") > strings.Index(b, "| 64 |") {
		t.Errorf("rows not ordered by ranks:\n%s", b)
	}
	checkPNG(t, filepath.Join(dir, "launch.png"))
}

func TestLaunchSectionRefusesLineWithoutRuns(t *testing.T) {
	r, err := parseLine([]byte(`{"nproc":8,"ready_p50_s":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&gen{}).launch([]record{r}); err == nil || !strings.Contains(err.Error(), "without nproc or runs") {
		t.Errorf("launch = %v, want a refusal", err)
	}
}
