import { Controller, Get, Header } from '@nestjs/common';
import { DASHBOARD_HTML } from './dashboard-page';

/**
 * `GET /`: the dashboard page. Left open like /health: the page holds no data;
 * everything it shows comes from the guarded JSON endpoints.
 */
@Controller()
export class DashboardController {
  @Get()
  @Header('Content-Type', 'text/html; charset=utf-8')
  @Header('Cache-Control', 'no-store')
  page(): string {
    return DASHBOARD_HTML;
  }
}
