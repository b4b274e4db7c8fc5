// tests/e2e/gateway/structured_clients.mjs - structured output and tool calls
// through the npm clients applications use (test_gw_structured installs them
// from npm): the Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`)
// generateObject with a Zod schema and a two-turn agent loop (tool call ->
// tool result -> answer), and LangChain's ChatOpenAI withStructuredOutput
// (json_schema, and function calling: a named tool_choice). stories260K
// writes nonsense; what is checked is that every object parses and matches
// its schema. Exit 0: all matched.
import {createOpenAICompatible, OpenAICompatibleChatLanguageModel} from '@ai-sdk/openai-compatible';
import {ChatOpenAI} from '@langchain/openai';
import {generateObject, generateText, tool} from 'ai';
import {z} from 'zod';

const url = process.env.MOON_GW_URL;

function fail(why) {
  console.error('structured clients: ' + why);
  process.exit(1);
}

// small: stories260K has 512 tokens of context for the tools prompt and the call
const schema = z.object({name: z.string().max(8), age: z.number().int().nonnegative()});

const provider = createOpenAICompatible({name: 'moonlet', baseURL: url, apiKey: 'none'});
const model = provider.chatModel('stories260K');
// the same model declaring structured outputs: generateObject then sends
// response_format json_schema instead of a forced tool call
const structured = new OpenAICompatibleChatLanguageModel('stories260K', {}, {
  provider: 'moonlet.chat',
  url: ({path}) => url + path,
  headers: () => ({}),
  supportsStructuredOutputs: true,
  defaultObjectGenerationMode: 'json',
});

// AI SDK generateObject with a Zod schema, both ways
for (const [m, seed] of [[model, 1], [model, 2], [structured, 3], [structured, 4]]) {
  const {object} = await generateObject(
      {model: m, schema, prompt: 'Describe a person', temperature: 0.8, seed});
  const parsed = schema.safeParse(object);
  if (!parsed.success) fail('generateObject: ' + JSON.stringify(object));
}

// AI SDK agent loop: turn 1 must call the tool, turn 2 answers with its result
const weather = tool({
  description: 'weather in a city',
  parameters: z.object({city: z.string().max(6)}),
  execute: async ({city}) => ({city, sky: 'sunny'}),
});
const messages = [{role: 'user', content: 'Weather in Paris?'}];
const turn1 = await generateText(
    {model, tools: {weather}, toolChoice: {type: 'tool', toolName: 'weather'}, messages,
     temperature: 0.5, seed: 4});
if (turn1.toolCalls.length < 1 || turn1.toolResults.length !== turn1.toolCalls.length ||
    turn1.toolCalls[0].toolName !== 'weather' || typeof turn1.toolCalls[0].args.city !== 'string') {
  fail('agent turn 1: ' + JSON.stringify(turn1.toolCalls));
}
messages.push(...turn1.response.messages);
const turn2 = await generateText(
    {model, tools: {weather}, toolChoice: 'none', messages, maxTokens: 16, temperature: 0});
if (typeof turn2.text !== 'string' || turn2.toolCalls.length !== 0) {
  fail('agent turn 2: ' + JSON.stringify(turn2));
}

// LangChain withStructuredOutput, both methods
const chat = new ChatOpenAI(
    {model: 'stories260K', apiKey: 'none', configuration: {baseURL: url}, temperature: 0});
for (const method of ['jsonSchema', 'functionCalling']) {
  const out = await chat.withStructuredOutput(schema, {name: 'person', method})
                  .invoke('Describe a person');
  if (!schema.safeParse(out).success) fail('langchain ' + method + ': ' + JSON.stringify(out));
}
console.log('structured clients: ok');
