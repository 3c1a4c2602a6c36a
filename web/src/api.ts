// The admin API client: gRPC-Web to the page's own origin (no CORS, no CDN).
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AdminService } from "./gen/libvirtprovider/admin/v1/admin_pb";

export const admin = createClient(
  AdminService,
  createGrpcWebTransport({ baseUrl: location.origin }),
);
