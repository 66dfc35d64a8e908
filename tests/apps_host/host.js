// The official MCP Apps host bridge, for a test page of our own: window.AppsHost.{AppBridge, PostMessageTransport}.
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";

window.AppsHost = { AppBridge, PostMessageTransport };
