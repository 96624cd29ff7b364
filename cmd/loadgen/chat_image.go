package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"slices"
	"strconv"
)

// Image chats (--chat-image-px): each session's first user turn carries one picture of its
// own, a px×px PNG in a data: URL placed before the turn's text (so the prompt before it is
// the shared system prompt only: what follows is routed exactly only through the image), with
// the uuid
// "loadgen-<seed>-<session>" unless --chat-image-uuid=false; later turns resend it with the
// conversation, as a chat front end does. A multimodal model directory as --tokenizer renders
// and expands the image for the ideal hit rate as the gateway does (chat.Renderer.Expand).

// maxImagePx bounds --chat-image-px (a 1024×1024 grey PNG is about 1 MiB before base64).
const maxImagePx = 1024

// contentPart is one part of a user message with media.
type contentPart struct {
	Type     string     `json:"type"`
	Text     string     `json:"text,omitempty"`
	ImageURL *urlObject `json:"image_url,omitempty"`
	UUID     string     `json:"uuid,omitempty"`
}

type urlObject struct {
	URL string `json:"url"`
}

// sessionImage returns session s's picture as a data: URL: a grey gradient whose slopes and
// offset depend on the seed and the session, so no two sessions send the same bytes, while
// PNG's filters keep it small (a few KiB at 448×448).
func sessionImage(seed uint64, s, px int) (string, error) {
	img := image.NewGray(image.Rect(0, 0, px, px))
	x := (seed+1)*0x9e3779b97f4a7c15 ^ uint64(s+1)*0xbf58476d1ce4e5b9
	x ^= x >> 31
	dx, dy, base := int(x&7)+1, int(x>>3&7)+1, int(x>>6)
	for y := range px {
		for i := range px {
			img.Pix[y*img.Stride+i] = byte(base + i*dx + y*dy)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return "", fmt.Errorf("loadgen: session image: %w", err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes()), nil
}

// imageUserContent is the first user turn of an image session: its image, then its text.
func imageUserContent(text, url, uuid string) []contentPart {
	return []contentPart{{Type: "image_url", ImageURL: &urlObject{URL: url}, UUID: uuid}, {Type: "text", Text: text}}
}

// sessionUUID is session s's image uuid.
func sessionUUID(seed uint64, s int) string {
	return "loadgen-" + strconv.FormatUint(seed, 10) + "-" + strconv.Itoa(s)
}

// firstMediaToken is the index of the first of the model's media placeholder ids in ids
// (len(ids) when none): where a first turn stops sharing its prompt with another session's,
// whose picture is another.
func firstMediaToken(ids, media []uint32) int {
	for i, id := range ids {
		if slices.Contains(media, id) {
			return i
		}
	}
	return len(ids)
}
