package engine

// modelCard is the part of a /v1/models card that model discovery reads.
type modelCard struct {
	ID     string `json:"id"`
	Root   string `json:"root"`
	Parent string `json:"parent"`
}

// splitModels returns the base model and the LoRA adapters of a /v1/models listing: the base is
// the first card without a parent (else the first card). vLLM lists an adapter as a card whose
// "parent" is the base model (and whose "root" is the adapter's path); a card is an adapter when
// its parent is set and differs from its own id, or, with no parent, when its root is set and
// differs from both the base's root and the base's id (aliases of the base share its root).
// Adapters are read with the model; adapters loaded into a running engine later are not seen.
func splitModels(cards []modelCard) (base string, adapters []string) {
	if len(cards) == 0 {
		return "", nil
	}
	bi := 0
	for i, c := range cards {
		if c.Parent == "" && c.ID != "" {
			bi = i
			break
		}
	}
	b := cards[bi]
	for i, c := range cards {
		if i == bi || c.ID == "" || c.ID == b.ID {
			continue
		}
		switch {
		case c.Parent != "" && c.Parent != c.ID:
		case c.Parent == "" && c.Root != "" && c.Root != b.Root && c.Root != b.ID:
		default:
			continue
		}
		adapters = append(adapters, c.ID)
	}
	return b.ID, adapters
}
