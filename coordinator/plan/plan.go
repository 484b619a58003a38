// Package plan turns a job spec into its physical plan: every vertex
// (source, operator, sink) expanded into Parallelism tasks, and every input
// edge expanded into channels between producer and consumer tasks, each with
// its output port (on the producer), input port (on the consumer) and
// partitioner. Everything here is plain JSON-serializable data: the
// coordinator builds it, workers run it.
//
// IDs are stable and usable as NATS subject tokens, JetStream consumer
// names and KV keys: a task is "NAME-INDEX" (shown as "NAME[INDEX]"), a
// channel is "FROMTASK_TOTASK_INPORT".
//
// Port numbering: a consumer's input ports are its inputs in spec order (a
// sink has one, port 0). A producer's output ports are those
// jobspec.OutputReaders gives its readers: an input that names its port
// (port: N) takes it, the others the ports left in the order its
// consumers declare it — operators in spec order and, within one, their
// inputs in order, then sinks in spec order.
package plan

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// Kind is the kind of a vertex.
type Kind string

// Vertex kinds.
const (
	Source   Kind = "source"
	Operator Kind = "operator"
	Sink     Kind = "sink"
)

// Plan is a job's physical plan.
type Plan struct {
	Job      string    `json:"job"`
	Vertices []Vertex  `json:"vertices"`
	Tasks    []Task    `json:"tasks"`
	Channels []Channel `json:"channels"`
}

// Vertex is one source, operator or sink of the spec.
type Vertex struct {
	Name        string `json:"name"`
	Kind        Kind   `json:"kind"`
	Parallelism int    `json:"parallelism"`
	// Inputs are the vertex's input edges by input port.
	Inputs []Edge `json:"inputs,omitempty"`
	// Outputs are the vertex's output edges by output port.
	Outputs []Edge `json:"outputs,omitempty"`
	// Tasks are the IDs of the vertex's tasks by index.
	Tasks []string `json:"tasks"`
}

// Edge is a logical connection between two vertices.
type Edge struct {
	From      string `json:"from"`
	To        string `json:"to"`
	OutPort   int    `json:"out_port"`
	InPort    int    `json:"in_port"`
	Partition string `json:"partition"`
}

// Task is one parallel instance of a vertex.
type Task struct {
	ID          string `json:"id"`
	Vertex      string `json:"vertex"`
	Kind        Kind   `json:"kind"`
	Index       int    `json:"index"`
	Parallelism int    `json:"parallelism"`
	// Inputs holds, per input port, the IDs of the channels feeding the task
	// in producer-index order.
	Inputs [][]string `json:"inputs,omitempty"`
	// Outputs holds, per output port, the partitioner and the IDs of the
	// channels leaving the task in consumer-index order: a KeyHash
	// partitioner sends a record to Channels[hash(key) % len(Channels)].
	Outputs []Output `json:"outputs,omitempty"`
}

// Output is one output port of a task.
type Output struct {
	Partition string   `json:"partition"`
	Channels  []string `json:"channels"`
}

// Channel connects one producer task's output port to one consumer task's
// input port.
type Channel struct {
	ID        string `json:"id"`
	From      string `json:"from"`
	To        string `json:"to"`
	OutPort   int    `json:"out_port"`
	InPort    int    `json:"in_port"`
	Partition string `json:"partition"`
}

// TaskID returns the ID of instance index of vertex.
func TaskID(vertex string, index int) string { return fmt.Sprintf("%s-%d", vertex, index) }

// ChannelID returns the ID of the channel from task from to input port
// inPort of task to.
func ChannelID(from, to string, inPort int) string { return fmt.Sprintf("%s_%s_%d", from, to, inPort) }

// DisplayName returns "vertex[index]" for a task.
func (t Task) DisplayName() string { return fmt.Sprintf("%s[%d]", t.Vertex, t.Index) }

// MaxChannels is the most channels a plan may have: enough for any job a
// worker fleet can run, few enough that building the plan cannot exhaust
// the coordinator's memory.
const MaxChannels = 1 << 18

// Build expands a validated spec into its plan. It checks what the plan
// relies on, for a spec that did not come from jobspec.Parse (the job API
// decodes specs from JSON): names usable as IDs, each parallelism from 1
// to jobspec.MaxParallelism, and at most MaxChannels channels.
func Build(s *jobspec.Spec) (*Plan, error) {
	if err := check(s); err != nil {
		return nil, err
	}
	p := &Plan{Job: s.Name}
	vidx := map[string]int{}
	add := func(name string, kind Kind, par int) {
		vidx[name] = len(p.Vertices)
		v := Vertex{Name: name, Kind: kind, Parallelism: par}
		for i := 0; i < par; i++ {
			v.Tasks = append(v.Tasks, TaskID(name, i))
		}
		p.Vertices = append(p.Vertices, v)
	}
	for _, src := range s.Sources {
		add(src.Name, Source, src.Parallelism)
	}
	for _, op := range s.Operators {
		add(op.Name, Operator, op.Parallelism)
	}
	for _, sk := range s.Sinks {
		add(sk.Name, Sink, sk.Parallelism)
	}
	if len(vidx) != len(p.Vertices) {
		return nil, fmt.Errorf("plan %s: duplicate vertex names", s.Name)
	}
	readers := jobspec.OutputReaders(s)
	// outPort is the output port of in.From that input inPort of to reads.
	outPort := func(to string, sink bool, inPort int, from string) int {
		for port, r := range readers[from] {
			if r.Name == to && r.Sink == sink && r.Input == inPort {
				return port
			}
		}
		return -1
	}
	connect := func(to string, inPort int, in jobspec.Input) error {
		fi, ok := vidx[in.From]
		if !ok {
			return fmt.Errorf("plan %s: %s reads from unknown %q", s.Name, to, in.From)
		}
		from := &p.Vertices[fi]
		if from.Kind == Sink {
			return fmt.Errorf("plan %s: %s reads from sink %q", s.Name, to, in.From)
		}
		part := in.Partition
		if part == "" {
			part = jobspec.RoundRobin
			if from.Parallelism == p.Vertices[vidx[to]].Parallelism {
				part = jobspec.Forward
			}
		}
		e := Edge{From: in.From, To: to, OutPort: outPort(to, p.Vertices[vidx[to]].Kind == Sink, inPort, in.From), InPort: inPort, Partition: part}
		if part == jobspec.Forward && from.Parallelism != p.Vertices[vidx[to]].Parallelism {
			return fmt.Errorf("plan %s: forward edge %s -> %s between different parallelisms", s.Name, in.From, to)
		}
		from.Outputs = append(from.Outputs, e)
		p.Vertices[vidx[to]].Inputs = append(p.Vertices[vidx[to]].Inputs, e)
		return nil
	}
	for _, op := range s.Operators {
		for port, in := range op.Inputs {
			if err := connect(op.Name, port, in); err != nil {
				return nil, err
			}
		}
	}
	for _, sk := range s.Sinks {
		if err := connect(sk.Name, 0, sk.Input); err != nil {
			return nil, err
		}
	}
	// Output ports in order: an input that gives its port (jobspec
	// Input.Port) may take one before readers listed earlier.
	for i := range p.Vertices {
		outs := p.Vertices[i].Outputs
		slices.SortFunc(outs, func(a, b Edge) int { return a.OutPort - b.OutPort })
		for port, e := range outs {
			if e.OutPort != port {
				return nil, fmt.Errorf("plan %s: output port %d of %s goes to %s, want port %d: give each reader of it a port of its own, from 0 up without gaps", s.Name, e.OutPort, e.From, e.To, port)
			}
		}
	}
	// Tasks with empty port tables.
	tidx := map[string]int{}
	for _, v := range p.Vertices {
		for i, id := range v.Tasks {
			t := Task{ID: id, Vertex: v.Name, Kind: v.Kind, Index: i, Parallelism: v.Parallelism}
			if len(v.Inputs) > 0 {
				t.Inputs = make([][]string, len(v.Inputs))
			}
			if len(v.Outputs) > 0 {
				t.Outputs = make([]Output, len(v.Outputs))
			}
			for o, e := range v.Outputs {
				t.Outputs[o].Partition = e.Partition
			}
			tidx[id] = len(p.Tasks)
			p.Tasks = append(p.Tasks, t)
		}
	}
	// Channels, in consumer order so each port's list is in producer order
	// and each output's list in consumer order.
	for _, v := range p.Vertices {
		for _, e := range v.Inputs {
			from := p.Vertices[vidx[e.From]]
			for j, to := range v.Tasks {
				for i, fromTask := range from.Tasks {
					if e.Partition == jobspec.Forward && i != j {
						continue
					}
					c := Channel{ID: ChannelID(fromTask, to, e.InPort), From: fromTask, To: to,
						OutPort: e.OutPort, InPort: e.InPort, Partition: e.Partition}
					p.Channels = append(p.Channels, c)
					ti := &p.Tasks[tidx[to]]
					ti.Inputs[e.InPort] = append(ti.Inputs[e.InPort], c.ID)
				}
			}
		}
	}
	// Output channel lists ordered by consumer index.
	for i := range p.Channels {
		c := p.Channels[i]
		t := &p.Tasks[tidx[c.From]]
		t.Outputs[c.OutPort].Channels = append(t.Outputs[c.OutPort].Channels, c.ID)
	}
	consumer := make(map[string]int, len(p.Channels)) // channel → consumer index
	for _, c := range p.Channels {
		consumer[c.ID] = p.Tasks[tidx[c.To]].Index
	}
	for i := range p.Tasks {
		for o := range p.Tasks[i].Outputs {
			chs := p.Tasks[i].Outputs[o].Channels
			sort.SliceStable(chs, func(a, b int) bool { return consumer[chs[a]] < consumer[chs[b]] })
		}
	}
	return p, nil
}

// check refuses a spec whose plan would be unusable or too large to build.
func check(s *jobspec.Spec) error {
	if !jobspec.ValidName(s.Name) {
		return fmt.Errorf("plan: job: %s", jobspec.BadName(s.Name))
	}
	par := map[string]int{}
	vertex := func(kind Kind, name string, n int) error {
		if !jobspec.ValidName(name) {
			return fmt.Errorf("plan %s: %s: %s", s.Name, kind, jobspec.BadName(name))
		}
		if n < 1 || n > jobspec.MaxParallelism {
			return fmt.Errorf("plan %s: %s %s: parallelism %d, want 1 to %d", s.Name, kind, name, n, jobspec.MaxParallelism)
		}
		par[name] = n
		return nil
	}
	for _, v := range s.Sources {
		if err := vertex(Source, v.Name, v.Parallelism); err != nil {
			return err
		}
		if v.Partitions < 0 || v.Partitions > jobspec.MaxPartitions {
			return fmt.Errorf("plan %s: source %s: %d partitions, want at most %d", s.Name, v.Name, v.Partitions, jobspec.MaxPartitions)
		}
	}
	for _, v := range s.Operators {
		if err := vertex(Operator, v.Name, v.Parallelism); err != nil {
			return err
		}
	}
	for _, v := range s.Sinks {
		if err := vertex(Sink, v.Name, v.Parallelism); err != nil {
			return err
		}
	}
	// Count the channels before making them: with parallelisms in range,
	// no product overflows.
	channels := 0
	edge := func(to string, in jobspec.Input) error {
		n := par[in.From] * par[to]
		if par[in.From] == par[to] && (in.Partition == jobspec.Forward || in.Partition == "") {
			n = par[to] // one channel per consumer task
		}
		if channels += n; channels > MaxChannels {
			return fmt.Errorf("plan %s: %s reads %s over %d channels, more than the %d a job can have",
				s.Name, to, in.From, n, MaxChannels)
		}
		return nil
	}
	for _, op := range s.Operators {
		for _, in := range op.Inputs {
			if err := edge(op.Name, in); err != nil {
				return err
			}
		}
	}
	for _, sk := range s.Sinks {
		if err := edge(sk.Name, sk.Input); err != nil {
			return err
		}
	}
	return nil
}

// Task returns the task with the given ID.
func (p *Plan) Task(id string) (Task, bool) {
	for _, t := range p.Tasks {
		if t.ID == id {
			return t, true
		}
	}
	return Task{}, false
}

// Channel returns the channel with the given ID.
func (p *Plan) Channel(id string) (Channel, bool) {
	for _, c := range p.Channels {
		if c.ID == id {
			return c, true
		}
	}
	return Channel{}, false
}

// SourceTasks returns the IDs of all source tasks, in plan order: the tasks
// the checkpoint coordinator triggers.
func (p *Plan) SourceTasks() []string {
	var ids []string
	for _, t := range p.Tasks {
		if t.Kind == Source {
			ids = append(ids, t.ID)
		}
	}
	return ids
}

// TaskIDs returns every task ID in plan order: the tasks that must ack a
// checkpoint.
func (p *Plan) TaskIDs() []string {
	ids := make([]string, len(p.Tasks))
	for i, t := range p.Tasks {
		ids[i] = t.ID
	}
	return ids
}

// ErrNoWorkers is Assign's error when no worker is live.
var ErrNoWorkers = errors.New("no live workers")

// Worker is a live worker as placement sees it.
type Worker struct {
	ID string
	// Slots is the most tasks the worker runs at a time, of all jobs; 0
	// (or less) means no limit.
	Slots int
	// Used counts the tasks of other jobs placed on the worker now.
	Used int
	// Memory is the worker's memory budget in bytes: the most the memory
	// of the tasks placed on it may add up to (AssignMemory); 0 means no
	// limit. MemoryUsed is what the tasks of other jobs placed on it now
	// take of it.
	Memory, MemoryUsed int64
}

// freeMemory returns how many more bytes of task memory w takes, and
// false when it takes any amount.
func (w Worker) freeMemory() (int64, bool) {
	if w.Memory <= 0 {
		return 0, false
	}
	return max(w.Memory-w.MemoryUsed, 0), true
}

// free returns how many more tasks w takes, and false when it takes any
// number.
func (w Worker) free() (int, bool) {
	if w.Slots <= 0 {
		return 0, false
	}
	return max(w.Slots-w.Used, 0), true
}

// CapacityError is Assign's error when the live workers have fewer free
// slots than the plan has tasks: every worker has a limit (a worker
// without one takes any number of tasks).
type CapacityError struct {
	Job string
	// Tasks is how many tasks the plan has, Free how many the workers
	// take between them.
	Tasks, Free int
	// Workers are the live workers, sorted by ID.
	Workers []Worker
	// Memory, when set, is the task memory the plan needs (AssignMemory):
	// the workers have the slots, but not the memory budget, for it.
	Memory int64
}

// maxListed is how many workers a CapacityError names.
const maxListed = 10

// Shortfall says what is missing in one line: "needs 4 tasks, workers
// have 2 free (w1 0 of 2, w2 2 of 4)" — each worker's free slots of its
// total.
func (e *CapacityError) Shortfall() string {
	var b strings.Builder
	if e.Memory > 0 {
		// "needs 1GiB of operator memory (limits.memory), workers have 512MiB free
		// (w1 512MiB of 2GiB)"
		var free int64
		for _, w := range e.Workers {
			f, _ := w.freeMemory()
			free += f
		}
		fmt.Fprintf(&b, "needs %s of operator memory (limits.memory), workers have %s free (", jobspec.FormatSize(e.Memory), jobspec.FormatSize(free))
		e.listWorkers(&b, func(w Worker) string {
			if f, ok := w.freeMemory(); ok {
				return fmt.Sprintf("%s %s of %s", w.ID, jobspec.FormatSize(f), jobspec.FormatSize(w.Memory))
			}
			return w.ID + " no memory budget"
		})
		return b.String()
	}
	s := "s"
	if e.Tasks == 1 {
		s = ""
	}
	fmt.Fprintf(&b, "needs %d task%s, workers have %d free (", e.Tasks, s, e.Free)
	e.listWorkers(&b, func(w Worker) string {
		free, _ := w.free()
		return fmt.Sprintf("%s %d of %d", w.ID, free, w.Slots)
	})
	return b.String()
}

// listWorkers writes the first maxListed workers, each as item says, and
// how many more there are, then the closing bracket.
func (e *CapacityError) listWorkers(b *strings.Builder, item func(Worker) string) {
	for i, w := range e.Workers {
		if i == maxListed {
			fmt.Fprintf(b, ", and %d more", len(e.Workers)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(item(w))
	}
	b.WriteString(")")
}

func (e *CapacityError) Error() string { return "assign " + e.Job + ": " + e.Shortfall() }

// Assign places the plan's tasks on workers and returns worker ID → task
// IDs (in plan order). It is a pure function of its inputs and
// deterministic. Each task, in plan order, goes to a worker with a free
// slot (never more tasks on a worker than its Slots, counting Used):
//
//  1. the one with the fewest of the plan's tasks so far, so that a job
//     is spread over as many workers as it can be;
//  2. then the one with the most free capacity: a worker without a limit
//     before any with one, and among those without, the one with the
//     fewest tasks (Used and the plan's); among those with a limit, the
//     one with the most free slots;
//  3. then the lowest ID.
//
// Without workers it fails with ErrNoWorkers; when the free slots of all
// workers are fewer than the plan's tasks, with a *CapacityError.
func Assign(p *Plan, workers []Worker) (map[string][]string, error) {
	return AssignMemory(p, workers, nil)
}

// AssignMemory is Assign with a memory budget: a task of vertex v takes
// memory[v] bytes (none if absent) of a worker's Memory, and goes only to
// a worker with that much free (Memory - MemoryUsed - what the plan put
// there). It places as Assign does among the workers with room; when the
// tasks fit the slots but not the memory, it fails with a *CapacityError
// whose Memory is the plan's task memory.
func AssignMemory(p *Plan, workers []Worker, memory map[string]int64) (map[string][]string, error) {
	if len(workers) == 0 {
		return nil, fmt.Errorf("assign %s: %w", p.Job, ErrNoWorkers)
	}
	ws := slices.Clone(workers)
	slices.SortFunc(ws, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	total, limited := 0, true
	for _, w := range ws {
		free, ok := w.free()
		total += free
		limited = limited && ok
	}
	if limited && total < len(p.Tasks) {
		return nil, &CapacityError{Job: p.Job, Tasks: len(p.Tasks), Free: total, Workers: ws}
	}
	placed := make([]int, len(ws))      // the plan's tasks on each worker
	placedMem := make([]int64, len(ws)) // and their memory
	// better reports whether worker a is a better place than worker b.
	better := func(a, b int) bool {
		if placed[a] != placed[b] {
			return placed[a] < placed[b]
		}
		fa, la := ws[a].free()
		fb, lb := ws[b].free()
		switch {
		case la != lb:
			return !la // no limit first
		case !la:
			if na, nb := ws[a].Used+placed[a], ws[b].Used+placed[b]; na != nb {
				return na < nb
			}
		case fa-placed[a] != fb-placed[b]:
			return fa-placed[a] > fb-placed[b]
		}
		return a < b // sorted by ID
	}
	out := make(map[string][]string, len(ws))
	for _, t := range p.Tasks {
		best := -1
		need := memory[t.Vertex]
		for i, w := range ws {
			if free, ok := w.free(); ok && free-placed[i] <= 0 {
				continue
			}
			if free, ok := w.freeMemory(); ok && need > free-placedMem[i] {
				continue
			}
			if best < 0 || better(i, best) {
				best = i
			}
		}
		if best < 0 {
			// The free slots were counted above: the memory is short.
			var all int64
			for _, t := range p.Tasks {
				all += memory[t.Vertex]
			}
			return nil, &CapacityError{Job: p.Job, Tasks: len(p.Tasks), Free: total, Workers: ws, Memory: all}
		}
		placed[best]++
		placedMem[best] += need
		out[ws[best].ID] = append(out[ws[best].ID], t.ID)
	}
	return out, nil
}
