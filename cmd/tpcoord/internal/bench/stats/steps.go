package stats

import "github.com/tpcoord/tpcoord/broadcast/api"

// StepPhases is rank 0's step time per phase over some steps, in ms, each
// phase reduced by one aggregate (a median, a mean), from its flight
// recorder.
type StepPhases struct {
	Steps   int     `json:"steps"`
	Await   float64 `json:"await"`
	Publish float64 `json:"publish"`
	Forward float64 `json:"forward"`
	Sample  float64 `json:"sample"`
	Reply   float64 `json:"reply"`
	Total   float64 `json:"total"`
}

// SummarizeSteps reduces each phase over steps with agg; nil for none.
func SummarizeSteps(steps []api.StepTiming, agg func([]float64) float64) *StepPhases {
	if len(steps) == 0 {
		return nil
	}
	of := func(f func(api.StepTiming) float64) float64 {
		v := make([]float64, len(steps))
		for i, s := range steps {
			v[i] = f(s)
		}
		return agg(v)
	}
	return &StepPhases{
		Steps:   len(steps),
		Await:   of(func(s api.StepTiming) float64 { return s.AwaitMs }),
		Publish: of(func(s api.StepTiming) float64 { return s.PublishMs }),
		Forward: of(func(s api.StepTiming) float64 { return s.ForwardMs }),
		Sample:  of(func(s api.StepTiming) float64 { return s.SampleMs }),
		Reply:   of(func(s api.StepTiming) float64 { return s.ReplyMs }),
		Total:   of(func(s api.StepTiming) float64 { return s.TotalMs }),
	}
}

// Mean is the arithmetic mean of v (NaN for none).
func Mean(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}
