// Package conversation is the gateway's state of the OpenAI Responses API and its conversion
// to the chat pipeline: the gateway owns the state, so that every turn can run as a chat
// request on the existing path (rendered and tokenized exactly, routed cache-aware on the
// whole history, sent to any worker, HTTP or gRPC) and a follow-up lands where its history is
// cached, on any replica, with no affinity table.
//
// What it does, in a turn's order:
//   - Service.Begin expands a parsed request (openai.ParseResponses) into a Turn: the chain
//     its previous_response_id continues (every stored turn's input and output items, oldest
//     first, read in one store call: each record lists its ancestors) or the items of its
//     conversation, then its input, item_references resolved (an item id names its response,
//     ids.go), in the scope of the client key (pkg/clientauth.KeyName);
//   - on the Redis replica that wrote or read a chain, Begin expands it from the replica's
//     copies and Redis confirms them later: a streamed turn's at Turn.Confirm, which the
//     caller calls after rendering and tokenizing and before sending the turn upstream,
//     another's at Finish, in the round trip of its record's write; a record deleted or
//     expired elsewhere is missing all the same (a 404). Parsed stored items are kept per
//     record while it lives (memo.go), so a chain is parsed once, not on each follow-up;
//   - Turn.ChatBody writes the chat completion request the turn runs as (chat.go: vLLM's
//     conversion rules, and where kvgate departs from them);
//   - the worker's chat answer becomes response items: Turn.FromCompletion for a
//     chat.completion body, Stream for a chunk stream, which also writes the named events
//     (output.go, stream.go);
//   - Service.Finish stores the response and appends its items to its conversation; Service's
//     other methods (api.go) answer retrieve, delete, input_items and the Conversations API.
//
// Which store: Memory for one replica (bounded by bytes and a TTL since last use, least
// recently used dropped first), Redis for several replicas and restarts. Both scope every
// record to the client key that made it: another key's id is not found.
//
// The package knows nothing of HTTP handlers, workers or routing: pkg/router runs a Turn
// through its pipeline.
package conversation
