package topics

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ConfigError is a topic config refused by ValidateConfigs. Its message is
// the one Kafka's ConfigDef validators and LogConfig checks give, so that the
// broker can hand it to clients unchanged; it wraps ErrInvalidConfig.
type ConfigError struct {
	Name   string // the config refused
	Value  string // its value as given
	Reason string // why, as Kafka's validator says it ("Value must be at least 1048576")
	whole  bool   // Reason is the whole message, not "Invalid value ...: Reason"
	// request: the request is malformed rather than the value refused
	// (Kafka's INVALID_REQUEST: a key twice, APPEND on a single value).
	request bool
}

// InvalidRequest reports whether Kafka answers e with INVALID_REQUEST
// rather than INVALID_CONFIG.
func (e *ConfigError) InvalidRequest() bool { return e.request }

func (e *ConfigError) Error() string {
	if e.whole {
		return e.Reason
	}
	return fmt.Sprintf("Invalid value %s for configuration %s: %s", e.Value, e.Name, e.Reason)
}

func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// configType is how a config value parses, with Kafka's ConfigDef.Type names.
type configType int

const (
	typeInt     configType = iota // 32-bit integer
	typeLong                      // 64-bit integer
	typeDouble                    // float
	typeBoolean                   // true or false, any case
	typeString                    // one of oneOf
	typeList                      // comma-separated, each item one of oneOf (or checked by valid)
)

func (t configType) String() string {
	return [...]string{"INT", "LONG", "DOUBLE", "BOOLEAN", "STRING", "LIST"}[t]
}

// configDef is one topic config kaas accepts, with the bounds of Kafka 4.x's
// LogConfig (storage/src/main/java/org/apache/kafka/storage/internals/log/
// LogConfig.java). Values are trimmed first, as Kafka's parser does.
type configDef struct {
	typ      configType
	min, max int64    // inclusive bounds of numbers (math.MinInt64/MaxInt64: none)
	oneOf    []string // valid strings, or valid list items
	// valid is a further check of the trimmed value; it returns the
	// refusal, or nil.
	valid func(name, value string) *ConfigError
}

func atLeast(t configType, min int64) configDef {
	return configDef{typ: t, min: min, max: math.MaxInt64}
}

var (
	anyLong    = atLeast(typeLong, math.MinInt64)
	anyBoolean = configDef{typ: typeBoolean}
)

// configDefs lists the topic configs kaas accepts. Kafka 4.0 removed
// message.timestamp.difference.max.ms and message.downconversion.enable;
// kaas still accepts them, with their Kafka 3.x definitions.
var configDefs = map[string]configDef{
	"segment.bytes":                           atLeast(typeInt, 1<<20), // KIP-1030: 14 before Kafka 4.0
	"segment.ms":                              atLeast(typeLong, 1),
	"segment.jitter.ms":                       atLeast(typeLong, 0),
	"segment.index.bytes":                     atLeast(typeInt, 4),
	"flush.messages":                          atLeast(typeLong, 1),
	"flush.ms":                                atLeast(typeLong, 0),
	"retention.bytes":                         anyLong,
	"retention.ms":                            atLeast(typeLong, -1),
	"max.message.bytes":                       atLeast(typeInt, 0),
	"index.interval.bytes":                    atLeast(typeInt, 0),
	"delete.retention.ms":                     atLeast(typeLong, 0),
	"min.compaction.lag.ms":                   atLeast(typeLong, 0),
	"max.compaction.lag.ms":                   atLeast(typeLong, 1),
	"file.delete.delay.ms":                    atLeast(typeLong, 0),
	"min.cleanable.dirty.ratio":               {typ: typeDouble, min: 0, max: 1},
	"cleanup.policy":                          {typ: typeList, oneOf: []string{"compact", "delete"}},
	"unclean.leader.election.enable":          anyBoolean,
	"min.insync.replicas":                     atLeast(typeInt, 1),
	"compression.type":                        {typ: typeString, oneOf: []string{"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}},
	"preallocate":                             anyBoolean,
	"message.timestamp.type":                  {typ: typeString, oneOf: []string{"CreateTime", "LogAppendTime"}},
	"message.timestamp.before.max.ms":         atLeast(typeLong, 0),
	"message.timestamp.after.max.ms":          atLeast(typeLong, 0),
	"message.timestamp.difference.max.ms":     atLeast(typeLong, 0),
	"message.downconversion.enable":           anyBoolean,
	"remote.storage.enable":                   {typ: typeBoolean, valid: noTieredStorage},
	"local.retention.ms":                      atLeast(typeLong, -2),
	"local.retention.bytes":                   atLeast(typeLong, -2),
	"leader.replication.throttled.replicas":   {typ: typeList, valid: throttledReplicas},
	"follower.replication.throttled.replicas": {typ: typeList, valid: throttledReplicas},
}

// ValidateConfigs checks the names and values of topic configs as Kafka does
// on CreateTopics and AlterConfigs: unknown names, values that do not parse
// or fall outside their bounds, and min.compaction.lag.ms above
// max.compaction.lag.ms are refused with a *ConfigError. With several bad
// configs, the first by name is reported.
func ValidateConfigs(configs map[string]string) error {
	names := make([]string, 0, len(configs))
	for k := range configs {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if err := ValidateConfig(k, configs[k]); err != nil {
			return err
		}
	}
	// LogConfig.validateValues.
	minLag, maxLag := int64(0), int64(math.MaxInt64)
	if v, ok := configs["min.compaction.lag.ms"]; ok {
		minLag, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	}
	if v, ok := configs["max.compaction.lag.ms"]; ok {
		maxLag, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	}
	if minLag > maxLag {
		return &ConfigError{Name: "min.compaction.lag.ms", Value: strconv.FormatInt(minLag, 10), whole: true,
			Reason: fmt.Sprintf("conflict topic config setting min.compaction.lag.ms (%d) > max.compaction.lag.ms (%d)", minLag, maxLag)}
	}
	return nil
}

// ValidateConfig checks one topic config (see ValidateConfigs).
func ValidateConfig(name, value string) error {
	def, ok := configDefs[name]
	if !ok {
		return &ConfigError{Name: name, Value: value, Reason: "Unknown topic config name: " + name, whole: true}
	}
	v := strings.TrimSpace(value)
	refuse := func(reason string) error { return &ConfigError{Name: name, Value: v, Reason: reason} }
	switch def.typ {
	case typeInt, typeLong:
		bits := 64
		if def.typ == typeInt {
			bits = 32
		}
		n, err := strconv.ParseInt(v, 10, bits)
		if err != nil {
			return refuse("Not a number of type " + def.typ.String())
		}
		if n < def.min {
			return refuse(fmt.Sprintf("Value must be at least %d", def.min))
		}
		if n > def.max {
			return refuse(fmt.Sprintf("Value must be no more than %d", def.max))
		}
	case typeDouble:
		// Kafka's range check lets NaN through; kaas does not.
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) {
			return refuse("Not a number of type " + def.typ.String())
		}
		if f < float64(def.min) {
			return refuse(fmt.Sprintf("Value must be at least %d", def.min))
		}
		if f > float64(def.max) {
			return refuse(fmt.Sprintf("Value must be no more than %d", def.max))
		}
	case typeBoolean:
		if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
			return refuse("Expected value to be either true or false")
		}
	case typeString:
		if !slices.Contains(def.oneOf, v) {
			return refuse("String must be one of: " + strings.Join(def.oneOf, ", "))
		}
	case typeList:
		if def.oneOf != nil {
			for _, item := range listItems(v) {
				if !slices.Contains(def.oneOf, item) {
					return refuse("String must be one of: " + strings.Join(def.oneOf, ", "))
				}
			}
		}
	}
	if def.valid != nil {
		if ce := def.valid(name, v); ce != nil {
			return ce
		}
	}
	return nil
}

// listItems splits a trimmed list value as Kafka does: "" is the empty list.
func listItems(v string) []string {
	if v == "" {
		return nil
	}
	items := strings.Split(v, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

// noTieredStorage refuses remote.storage.enable=true as a Kafka broker
// without tiered storage does.
func noTieredStorage(name, v string) *ConfigError {
	if strings.EqualFold(v, "true") {
		return &ConfigError{Name: name, Value: v, whole: true,
			Reason: "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."}
	}
	return nil
}

var replicaPair = regexp.MustCompile(`^([0-9]+:[0-9]+)?$`)

// throttledReplicas is Kafka's ThrottledReplicaListValidator: "*" or a list
// of partitionId:brokerId.
func throttledReplicas(name, v string) *ConfigError {
	items := listItems(v)
	if strings.Join(items, "") == "*" {
		return nil
	}
	for _, item := range items {
		if !replicaPair.MatchString(item) {
			return &ConfigError{Name: name, Value: v, Reason: name +
				" must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."}
		}
	}
	return nil
}

// normalizeConfigs returns the configs as they are stored: values trimmed,
// as Kafka's parser reads them (the readers of a topic file parse strictly).
func normalizeConfigs(configs map[string]string) map[string]string {
	if configs == nil {
		return nil
	}
	out := make(map[string]string, len(configs))
	for k, v := range configs {
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// The operations of an IncrementalAlterConfigs entry (Kafka's OpType).
const (
	OpSet      int8 = 0
	OpDelete   int8 = 1
	OpAppend   int8 = 2
	OpSubtract int8 = 3
)

// ConfigOp is one IncrementalAlterConfigs entry for a topic.
type ConfigOp struct {
	Name  string
	Op    int8 // OpSet, OpDelete, OpAppend or OpSubtract
	Value *string
}

// applyOps returns configs with ops applied, checked as Kafka checks
// them: APPEND and SUBTRACT only on list configs, every resulting value
// valid, the whole set consistent.
func applyOps(configs map[string]string, ops []ConfigOp) (map[string]string, error) {
	out := make(map[string]string, len(configs)+len(ops))
	for k, v := range configs {
		out[k] = v
	}
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op.Name] {
			return nil, &ConfigError{Name: op.Name, whole: true, request: true, Reason: "Error due to duplicate config keys"}
		}
		seen[op.Name] = true
		value := ""
		if op.Value != nil {
			value = *op.Value
		}
		def, known := configDefs[op.Name]
		switch op.Op {
		case OpSet:
			if op.Value == nil {
				return nil, &ConfigError{Name: op.Name, whole: true, Reason: "Null value not supported for : " + op.Name}
			}
			if err := ValidateConfig(op.Name, value); err != nil {
				return nil, err
			}
			out[op.Name] = strings.TrimSpace(value)
		case OpDelete:
			if !known {
				return nil, &ConfigError{Name: op.Name, Value: value, Reason: "Unknown topic config name: " + op.Name, whole: true}
			}
			delete(out, op.Name)
		case OpAppend, OpSubtract:
			if !known {
				return nil, &ConfigError{Name: op.Name, Value: value, Reason: "Unknown topic config name: " + op.Name, whole: true}
			}
			if def.typ != typeList {
				verb := "append"
				if op.Op == OpSubtract {
					verb = "subtract"
				}
				return nil, &ConfigError{Name: op.Name, whole: true, request: true,
					Reason: "Config value " + verb + " is not allowed for config key: " + op.Name}
			}
			current, ok := out[op.Name]
			if !ok && op.Name == "cleanup.policy" {
				current = "delete" // Kafka's default is what APPEND and SUBTRACT start from
			}
			items := listItems(strings.TrimSpace(current))
			for _, item := range listItems(strings.TrimSpace(value)) {
				has := slices.Contains(items, item)
				switch {
				case op.Op == OpAppend && !has:
					items = append(items, item)
				case op.Op == OpSubtract && has:
					items = slices.DeleteFunc(items, func(s string) bool { return s == item })
				}
			}
			joined := strings.Join(items, ",")
			if err := ValidateConfig(op.Name, joined); err != nil {
				return nil, err
			}
			out[op.Name] = joined
		default:
			return nil, &ConfigError{Name: op.Name, whole: true, request: true, Reason: fmt.Sprintf("Unknown operation type %d", op.Op)}
		}
	}
	if err := ValidateConfigs(out); err != nil {
		return nil, err
	}
	return out, nil
}
