package chat

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ardanlabs/jinja"
	"github.com/zeebo/xxh3"

	"github.com/kvgate/kvgate/pkg/openai"
)

// Media parts of multimodal models (wire/vllm-chat.md §3, vLLM chat_utils.py
// _parse_chat_message_content_part). The gateway never fetches a URL: it validates each part as
// the engine does before fetching, counts the items against --limit-mm-per-prompt and hashes
// what the request itself carries (uuid, data: bytes, or the URL text) for routing. The
// template sees a media part as {"type": modality}; in string format the model's placeholder
// text is put in front of the message's text.

// Multimodal settings (Options.Multimodal).
const (
	MultimodalAuto = "auto" // detect from the model directory ("" means the same)
	MultimodalOn   = "on"
	MultimodalOff  = "off"
)

// DefaultMediaLimit is vLLM's default --limit-mm-per-prompt count for every modality.
const DefaultMediaLimit = 999

// DefaultMaxMediaBytes bounds the decoded bytes of one data: URL when Options.MaxMediaBytes is
// zero.
const DefaultMaxMediaBytes = 20 << 20

// MediaItem is one media part of a request, in prompt order.
type MediaItem struct {
	Modality string // "image", "audio" or "video"
	Type     string // the part type as sent (image_url, input_image, input_audio, ...)
	// URL is the item's URL (for input_audio the data: URL vLLM builds from it); "" when the
	// part names only a uuid.
	URL string
	// UUID is the part's uuid (the engine then uses it as the item's hash); HasUUID tells an
	// empty one from none.
	UUID    string
	HasUUID bool
	// Data is the decoded payload of a data: URL (nil for other URLs); MediaType its type.
	Data      []byte
	MediaType string
	// Width and Height are an image's size read from its data: URL header (0 when unknown);
	// Tokens is how many tokens the engine's processor puts in place of its placeholder, when
	// the model family's rule is known (placeholders.go), else 0.
	Width, Height, Tokens int
	// Hash identifies the item for routing: of the uuid when given, else of the data bytes,
	// else of the URL text (the gateway's own key, never the engine's mm hash).
	Hash uint64
	// Message and Part locate the item in the request.
	Message, Part int
}

// placeholders are vLLM's per-model placeholder strings (get_placeholder_str of the model
// class), used for string-format templates only.
var placeholders = map[string]map[string]string{
	"qwen2_vl":     qwenPlaceholders,
	"qwen2_5_vl":   qwenPlaceholders,
	"qwen3_vl":     qwenPlaceholders,
	"qwen3_vl_moe": qwenPlaceholders,
	"gemma3":       {"image": "<start_of_image>"},
}

var qwenPlaceholders = map[string]string{
	"image": "<|vision_start|><|image_pad|><|vision_end|>",
	"video": "<|vision_start|><|video_pad|><|vision_end|>",
}

// mediaPartKeys are the part types vLLM's fallback path recognises by key when a part has no
// type (or has a uuid), in its order, with their modality.
var mediaPartKeys = []struct{ key, modality string }{
	{"image_url", "image"}, {"image_embeds", "image"}, {"audio_embeds", "audio"},
	{"audio_url", "audio"}, {"input_audio", "audio"}, {"video_url", "video"},
}

var mediaTypeModality = map[string]string{
	"image_url": "image", "input_image": "image", "image_embeds": "image",
	"audio_url": "audio", "input_audio": "audio", "audio_embeds": "audio", "video_url": "video",
}

// supportedPartTypes is vLLM's list in its "Unsupported chat content part type" message.
const supportedPartTypes = "audio_embeds, audio_url, image_embeds, image_pil, image_url, input_audio, input_image, input_text, output_text, prompt_embeds, refusal, text, thinking, tool_reference, video_url"

// mediaState counts a request's items against the limits while its messages are converted.
type mediaState struct {
	r      *Renderer
	items  []MediaItem
	counts map[string]int
	// noDecode checks data: URLs' form without decoding them (partModality).
	noDecode bool
}

// parseMediaPart reads a non-text part of message i, part j, as vLLM does, and records it.
func (s *mediaState) parseMediaPart(p *openai.ContentPart, i, j int, param string) (string, *openai.Error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p.Raw, &m); err != nil {
		return "", openai.BadRequest(param, "content part is not a valid object")
	}
	it := MediaItem{Type: p.Type, Message: i, Part: j}
	if u, ok := m["uuid"]; ok && !isNullJSON(u) {
		it.UUID, it.HasUUID = jsonScalarString(u), true
	}
	typ := p.Type
	if typ == "" || it.HasUUID {
		// vLLM's fallback: the part is known by its media key.
		typ = ""
		for _, k := range mediaPartKeys {
			if _, ok := m[k.key]; ok && (k.key != "input_audio" || !isNullJSON(m[k.key])) {
				typ = k.key
				break
			}
		}
		if typ == "" {
			if p.Type == "" {
				return "", openai.BadRequest(param, "Missing 'type' field in multimodal part.")
			}
			typ = p.Type
		}
		it.Type = typ
	}
	modality, ok := mediaTypeModality[typ]
	if !ok {
		if typ == "prompt_embeds" {
			return "", openai.BadRequest(param, "prompt_embeds content parts need --enable-prompt-embeds, which the gateway does not support")
		}
		return "", openai.BadRequest(param+".type", fmt.Sprintf("Unsupported chat content part type: '%s'. Supported types: %s.", typ, supportedPartTypes))
	}
	it.Modality = modality
	key := typ
	if typ == "input_image" {
		key = "image_url" // the Responses part shape: {"type": "input_image", "image_url": URL}
	}
	if err := s.readMediaValue(&it, m[key], param+"."+key); err != nil {
		return "", err
	}
	s.counts[modality]++
	if limit := s.r.mediaLimit(modality); s.counts[modality] > limit {
		return "", openai.BadRequest(param, fmt.Sprintf("At most %d %s(s) may be provided in one prompt.", limit, modality))
	}
	switch {
	case it.HasUUID:
		it.Hash = xxh3.HashString("uuid:" + it.UUID)
	case it.Data != nil:
		it.Hash = xxh3.Hash(it.Data)
	default:
		it.Hash = xxh3.HashString("url:" + it.URL)
	}
	s.items = append(s.items, it)
	return modality, nil
}

// readMediaValue reads the part's media value v (an {"url": …} object, a bare URL string for
// input_image and the fallback path, {"data","format"} for input_audio, anything for embeds)
// into it, validating URLs as the engine's media connector does before it fetches.
func (s *mediaState) readMediaValue(it *MediaItem, v json.RawMessage, param string) *openai.Error {
	if v == nil || isNullJSON(v) {
		if it.HasUUID {
			return nil // a uuid alone names an item the engine has cached
		}
		return openai.BadRequest(param, fmt.Sprintf("%s is required", param))
	}
	switch it.Type {
	case "image_embeds", "audio_embeds":
		it.Data = []byte(v) // hashed as sent; the engine needs --enable-mm-embeds
		return nil
	case "input_audio":
		var a struct {
			Data   *string `json:"data"`
			Format *string `json:"format"`
		}
		if json.Unmarshal(v, &a) != nil || a.Data == nil || a.Format == nil {
			return openai.BadRequest(param, param+" must be an object with string data and format")
		}
		if *a.Data == "" {
			if it.HasUUID {
				return nil
			}
			return openai.BadRequest(param+".data", "input_audio.data is empty")
		}
		it.URL = "data:audio/" + *a.Format + ";base64," + *a.Data
		return s.readURL(it, param+".data")
	}
	var url string
	if err := json.Unmarshal(v, &url); err != nil {
		var o struct {
			URL *string `json:"url"`
		}
		if json.Unmarshal(v, &o) != nil || o.URL == nil {
			return openai.BadRequest(param+".url", param+".url must be a string")
		}
		url = *o.URL
		param += ".url"
	}
	it.URL = url
	return s.readURL(it, param)
}

// readURL checks it.URL's scheme (http(s), data and file pass, as for the engine; file URLs are
// the engine's to allow or refuse) and decodes a data: URL, bounded by MaxMediaBytes.
func (s *mediaState) readURL(it *MediaItem, param string) *openai.Error {
	u := it.URL
	scheme, rest, ok := strings.Cut(u, ":")
	if ok {
		scheme = strings.ToLower(scheme)
	}
	switch {
	case ok && (strings.HasPrefix(scheme, "http") || scheme == "file"):
		return nil
	case ok && scheme == "data":
	default:
		return openai.BadRequest(param, "The URL must be either a HTTP, data or file URL.")
	}
	spec, data, ok := strings.Cut(rest, ",")
	if !ok {
		return openai.BadRequest(param, "malformed data URL: no ',' before the data")
	}
	mediaType, enc, ok := strings.Cut(spec, ";")
	if !ok {
		return openai.BadRequest(param, "malformed data URL: expected 'data:<media type>;base64,<data>'")
	}
	if enc != "base64" {
		return openai.BadRequest(param, "Only base64 data URLs are supported for now.")
	}
	if n := base64.StdEncoding.DecodedLen(len(data)); n > s.r.maxMedia {
		return &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Param: param, Code: "request_too_large",
			Message: fmt.Sprintf("a data URL may carry at most %d bytes of media, this one about %d", s.r.maxMedia, n)}
	}
	if s.noDecode {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return openai.BadRequest(param, "malformed data URL: the data is not valid base64")
	}
	it.Data, it.MediaType = b, mediaType
	return nil
}

// jsonScalarString is vLLM's str(uuid) for a JSON string or number (other values: their
// JSON text).
func jsonScalarString(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// mediaLimit is the --limit-mm-per-prompt count of a modality.
func (r *Renderer) mediaLimit(modality string) int {
	if n, ok := r.opts.MediaLimits[modality]; ok {
		return n
	}
	return DefaultMediaLimit
}

// modalityPart is the template's view of a media part in openai format.
func modalityPart(modality string) jinja.Value {
	p := jinja.NewDict()
	p.AsDict().Keys = make([]string, 0, 1)
	p.AsDict().Set("type", jinja.NewString(modality))
	return p
}

// stringFormatMedia is vLLM's _get_full_multimodal_text_prompt (interleave_mm_strings off): the
// placeholders of the message's items that its text does not already hold go in front, each
// on its own line.
func (r *Renderer) stringFormatMedia(text string, modalities []string, param string) (string, *openai.Error) {
	table, ok := placeholders[r.modelType]
	if !ok {
		return "", errNoPlaceholder
	}
	counts := map[string]int{}
	var order []string
	for _, m := range modalities {
		ph, ok := table[m]
		if !ok {
			return "", errNoPlaceholder
		}
		if counts[ph] == 0 {
			order = append(order, ph)
		}
		counts[ph]++
	}
	var missing []string
	for _, ph := range order {
		n := counts[ph] - strings.Count(text, ph)
		if n < 0 {
			return "", openai.BadRequest(param, fmt.Sprintf("Found more '%s' placeholders in input prompt than actual multimodal data items.", ph))
		}
		for ; n > 0; n-- {
			missing = append(missing, ph)
		}
	}
	if text != "" {
		missing = append(missing, text)
	}
	return strings.Join(missing, "\n"), nil
}

// errNoPlaceholder marks a string-format template on a model whose placeholder text the
// gateway does not know: the request is served but not rendered (Result.Unrendered).
var errNoPlaceholder = &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "no_placeholder",
	Message: "the gateway does not know this model's media placeholder text for string-format templates"}

// ParseMediaLimits reads --limit-mm-per-prompt: a JSON object of modality → count (vLLM also
// accepts an object per modality; only counts are read here).
func ParseMediaLimits(s string) (map[string]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("--limit-mm-per-prompt: %w", err)
	}
	out := make(map[string]int, len(raw))
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var n int
		if err := json.Unmarshal(raw[k], &n); err != nil {
			var o struct {
				Count *int `json:"count"`
			}
			if json.Unmarshal(raw[k], &o) != nil || o.Count == nil {
				return nil, fmt.Errorf("--limit-mm-per-prompt: %s must be a count or {\"count\": N}", k)
			}
			n = *o.Count
		}
		if n < 0 {
			return nil, fmt.Errorf("--limit-mm-per-prompt: %s must not be negative", k)
		}
		out[k] = n
	}
	return out, nil
}

// partHasUUID reports whether a part carries a non-null uuid (vLLM then reads it as media by
// its keys, whatever its type).
func partHasUUID(p *openai.ContentPart) bool {
	if !strings.Contains(string(p.Raw), `"uuid"`) {
		return false
	}
	var m struct {
		UUID json.RawMessage `json:"uuid"`
	}
	return json.Unmarshal(p.Raw, &m) == nil && m.UUID != nil && !isNullJSON(m.UUID)
}

// partModality is the modality of a media part already checked by collectMedia (a request
// template rendered in the sandbox has not been: there the part is checked again, without
// decoding).
func partModality(p *openai.ContentPart, param string) (string, *openai.Error) {
	s := mediaState{r: &Renderer{maxMedia: 1<<63 - 1}, counts: map[string]int{}, noDecode: true}
	return s.parseMediaPart(p, 0, 0, param)
}

// collectMedia validates, counts and hashes the media parts of req, in prompt order.
func (r *Renderer) collectMedia(req *openai.ChatRequest) ([]MediaItem, *openai.Error) {
	s := mediaState{r: r, counts: map[string]int{}}
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Content.Kind != openai.ContentParts {
			continue
		}
		for j := range m.Content.Parts {
			p := &m.Content.Parts[j]
			if p.IsString {
				continue
			}
			if _, ok := textPartTypes[p.Type]; ok && !partHasUUID(p) {
				continue
			}
			param := fmt.Sprintf("messages[%d].content[%d]", i, j)
			if _, err := s.parseMediaPart(p, i, j, param); err != nil {
				return nil, err
			}
		}
	}
	return s.items, nil
}

// mediaTokenKeys are the config.json keys (top level or text_config) naming the token ids a
// template emits for a media item and the engine's processor expands: Qwen2/2.5/3-VL
// image_token_id/video_token_id, Gemma 3 boi_token_index (the template emits
// <start_of_image>), LLaVA and others image_token_index, audio models audio_token_id/index.
var mediaTokenKeys = []string{"image_token_id", "image_token_index", "video_token_id", "video_token_index",
	"audio_token_id", "audio_token_index", "boi_token_index", "boi_token_id"}

// parseModelConfig reads model_type, whether the model has a vision or audio tower, and its
// media token ids from config.json; a malformed file leaves them unknown.
func (mf *modelFiles) parseModelConfig(b []byte) {
	var c map[string]json.RawMessage
	if json.Unmarshal(b, &c) != nil {
		return
	}
	_ = json.Unmarshal(c["model_type"], &mf.modelType)
	if mf.tokensPerImage == 0 {
		_ = json.Unmarshal(c["mm_tokens_per_image"], &mf.tokensPerImage)
	}
	_ = json.Unmarshal(c["boi_token_index"], &mf.boi)
	_ = json.Unmarshal(c["eoi_token_index"], &mf.eoi)
	_ = json.Unmarshal(c["image_token_index"], &mf.imageToken)
	for _, k := range []string{"vision_config", "audio_config"} {
		if v, ok := c[k]; ok && !isNullJSON(v) {
			mf.multimodal = true
		}
	}
	var text map[string]json.RawMessage
	_ = json.Unmarshal(c["text_config"], &text)
	for _, k := range mediaTokenKeys {
		for _, src := range []map[string]json.RawMessage{c, text} {
			var id uint32
			if v, ok := src[k]; ok && json.Unmarshal(v, &id) == nil {
				mf.mediaTokens = append(mf.mediaTokens, id)
				break
			}
		}
	}
}

// readProcessorFiles notes a preprocessor or processor config and reads the processor's
// chat template (chat_template.json).
func (mf *modelFiles) readProcessorFiles(dir string) error {
	for _, name := range []string{"preprocessor_config.json", "processor_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			mf.multimodal = true
		}
	}
	if b, err := readSmall(filepath.Join(dir, "preprocessor_config.json")); err == nil {
		mf.preprocessor = b
	}
	if b, err := readSmall(filepath.Join(dir, "processor_config.json")); err == nil {
		var c struct {
			N int `json:"image_seq_length"`
		}
		if json.Unmarshal(b, &c) == nil && c.N > 0 {
			mf.tokensPerImage = c.N
		}
	}
	b, err := readSmall(filepath.Join(dir, "chat_template.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var c struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("chat: %s: %w", filepath.Join(dir, "chat_template.json"), err)
	}
	mf.processorTemplate = c.ChatTemplate
	return nil
}

// IsMultimodalDir reports whether the model directory describes a multimodal model (what
// --multimodal auto decides).
func IsMultimodalDir(dir string) bool {
	mf := &modelFiles{}
	if b, err := readSmall(filepath.Join(dir, "config.json")); err == nil {
		mf.parseModelConfig(b)
	}
	_ = mf.readProcessorFiles(dir)
	return mf.multimodal
}

// setMultimodal applies Options.Multimodal, MediaLimits and MaxMediaBytes.
func (r *Renderer) setMultimodal(mf *modelFiles, opts Options) error {
	switch opts.Multimodal {
	case "", MultimodalAuto:
		r.multimodal = mf.multimodal
	case MultimodalOn:
		r.multimodal = true
	case MultimodalOff:
	default:
		return fmt.Errorf("chat: multimodal %q is not auto, on or off", opts.Multimodal)
	}
	r.mediaTokens = mf.mediaTokens
	if r.multimodal {
		r.vision = newVisionCounter(r.modelType, mf.preprocessor, mf.tokensPerImage)
		if r.modelType == "gemma3" {
			r.gemma = newGemmaImages(r.tok, mf.boi, mf.imageToken, mf.eoi, mf.tokensPerImage)
		}
	}
	r.maxMedia = opts.MaxMediaBytes
	if r.maxMedia <= 0 {
		r.maxMedia = DefaultMaxMediaBytes
	}
	for k, n := range opts.MediaLimits {
		if n < 0 {
			return fmt.Errorf("chat: media limit of %s is negative", k)
		}
	}
	return nil
}

// Multimodal reports whether the renderer accepts media parts.
func (r *Renderer) Multimodal() bool { return r.multimodal }

// mediaPositions returns how many leading ids are exactly the engine's (those before the
// first media placeholder token; 0 when the model's placeholder ids are unknown) and where
// each of the n items' placeholder token is (nil unless there is exactly one per item).
func (r *Renderer) mediaPositions(ids []uint32, n int) (int, []int) {
	if len(r.mediaTokens) == 0 {
		return 0, nil
	}
	var at []int
	for i, id := range ids {
		if slices.Contains(r.mediaTokens, id) {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return len(ids), nil // no placeholder: the engine expands none either
	}
	if len(at) != n {
		return at[0], nil
	}
	return at[0], at
}

// MediaTokens are the model's media placeholder token ids (config.json).
func (r *Renderer) MediaTokens() []uint32 { return r.mediaTokens }
